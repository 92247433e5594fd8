"""Outputs that other tools read, made from a finished run's record: a JUnit XML file
(:mod:`soak.outputs.junit`, for a CI system's test view) and a Markdown summary
(:mod:`soak.outputs.summary_md`, for a job's step summary).

Both are written by the CLI once the runner has written ``record.json`` (``--junit`` and
``--summary-md`` on ``run`` and ``demo``), or later from any run directory
(``soaktop junit RUN_DIR``, ``soaktop summary-md RUN_DIR``). They read the record, never
the live run: what they say is what the record says. The live figures for Prometheus are
the runner's own (:mod:`soak.run.metrics_export`): they belong to the run, not the record.
"""
