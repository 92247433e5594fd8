"""Probes: contract gates (json, tools, smoke, ...) and telemetry sources (host, NVML,
DCGM, engine /metrics, server logs). Never imports ``textual``, ``tui`` or ``soak``."""
