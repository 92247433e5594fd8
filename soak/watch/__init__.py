"""Telemetry watchers: the engine's ``/metrics``, ``/health`` and server logs, the host,
and the GPUs (:mod:`soak.watch.gpu`).

Each watcher samples on its own interval through :func:`soak.watch.periodic.every`,
journals what it saw, counts its coverage and raises events; none of them judges the run.
"""
