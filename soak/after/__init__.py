"""After the run: ``verify``, ``recover``, ``compare``, ``decide`` (and its rendering) and
the HTML report. They read run directories through :mod:`soak.record` and re-judge them
through :mod:`soak.judge`.
"""
