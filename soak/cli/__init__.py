"""Entry points: ``soaktop run``, ``demo``, ``decide``, ``compare``, ``report``, ``verify``,
``recover``, the headless follower and the glue the TUI calls.

The top floor: it may import every room below, and it is the only part of the headless
core that starts the simulated engine.
"""
