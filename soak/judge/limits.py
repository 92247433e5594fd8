"""The verdict's limits and their defaults, defined once.

The run config (``soak.run.config``) takes its defaults from here; ``soaktop recover`` and
``soaktop verify`` read a run's limits from its ``config.json`` with
:func:`limits_from_config`, where a key an older soaktop did not write takes the same
default. A changed default is changed here, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

MAX_FAILURES = 0
"""Load request failures tolerated before the run FAILS: none."""
MAX_LOOP_LAG_S = 0.5
"""Client event-loop lag p99 over the load above which the run is INVALID."""
MAX_CLIENT_CPU_PERCENT = 95.0
"""The runner's CPU (percent of one core) that counts as overloaded."""
MAX_CLIENT_BEHIND = 0.25
"""Share of sampled reads that found bytes already waiting in the socket
(``loadgen.read_health``) above which a second counts as the client behind the server's
writes; held for ``client_overload_s``, the run is INVALID. Measured (bench/client_behind.py,
fast paced server): ~0–2 % while the client keeps up, far above this once it falls behind."""
CLIENT_OVERLOAD_S = 10.0
"""How long client overload (CPU, in-flight shortfall, /health checks it could not send)
may last before the run is INVALID."""
MAX_SANITY_SHARE = 0.01
"""Share of completed load responses with a sanity flag (``loadgen.sanity``) above which
the run FAILS: 1 %, and only from ``SANITY_MIN_FLAGGED`` responses on."""
SANITY_MIN_FLAGGED = 5
"""Flagged responses below this many are a note, whatever their share (one odd answer in
a short run is no verdict)."""
PERCENTILE_METHOD: Literal["nearest-rank", "linear"] = "nearest-rank"
"""How the record's percentiles are taken (an observed value)."""


class Limits(TypedDict):
    """The limits a verdict is judged against (keyword arguments of
    :class:`soak.judge.facts.RunFacts`)."""

    max_failures: int
    max_loop_lag_s: float
    client_overload_s: float
    max_client_cpu_percent: float
    max_client_behind: float
    require_telemetry: list[str]
    reconcile_strict: bool
    max_sanity_share: float


def limits_from_config(config: Mapping[str, Any]) -> Limits:
    """A run's limits from its configuration as ``config.json`` holds it (the public
    config: the runner's own, recover's and verify's input); missing keys take the
    defaults above."""
    return Limits(
        max_failures=int(config.get("max_failures", MAX_FAILURES)),
        max_loop_lag_s=float(config.get("max_loop_lag_s", MAX_LOOP_LAG_S)),
        client_overload_s=float(config.get("client_overload_s", CLIENT_OVERLOAD_S)),
        max_client_cpu_percent=float(config.get("max_client_cpu_percent", MAX_CLIENT_CPU_PERCENT)),
        max_client_behind=float(config.get("max_client_behind", MAX_CLIENT_BEHIND)),
        require_telemetry=list(config.get("require_telemetry") or []),
        reconcile_strict=config.get("reconcile") == "strict",
        max_sanity_share=float(config.get("max_sanity_share", MAX_SANITY_SHARE)),
    )


def percentile_method(config: Mapping[str, Any]) -> Literal["nearest-rank", "linear"]:
    """The run's percentile method from its ``config.json`` (the default when missing)."""
    return "linear" if config.get("percentile_method") == "linear" else PERCENTILE_METHOD
