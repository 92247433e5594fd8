"""The telemetry options of :class:`soak.run.config.RunConfig`, checked.

What the run watches beside the load: ``require_telemetry`` (the kinds that must cover
it: each one named needs a configured source — a GPU source for ``gpu``, a followed log
for ``log``) and ``server_log_cmd`` (each a command line whose program is on PATH). The
model's validators call these; each problem is a sentence naming the value and what
would do instead.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from soak.run.config_checks import which

if TYPE_CHECKING:
    from soak.run.config import RunConfig


def required_kinds(v: Any) -> Any:
    """``require_telemetry`` as given (a comma list or a list of names), parsed and
    checked (:func:`soak.judge.coverage.parse_required`); anything else is left for
    pydantic's own error, which names the type."""
    from soak.judge.coverage import parse_required

    if isinstance(v, str):
        v = v.split(",")
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return v
    return parse_required([x for x in v if x.strip()])


def sources_problem(cfg: RunConfig) -> str | None:
    """Why a required telemetry kind can have no data (it has no source), or None."""
    if "gpu" in cfg.require_telemetry and not cfg.gpu_telemetry:
        return (
            "require_telemetry names gpu but no GPU source is configured (nvml is off "
            "and no dcgm URL): drop gpu or give --dcgm URL / drop --no-nvml"
        )
    if "log" in cfg.require_telemetry and not (cfg.server_log or cfg.server_log_cmd):
        return (
            "require_telemetry names log but no server log is followed: give "
            "--server-log PATH or --server-log-cmd CMD, or drop log"
        )
    return None


def command_problem(cmd: str) -> str | None:
    """Why ``cmd`` (a ``server_log_cmd``) cannot be run, or None."""
    try:
        argv = shlex.split(cmd)
    except ValueError as e:
        return f"{cmd!r} is not a command line: {e}"
    if not argv:
        return "an empty command; give e.g. 'docker logs -f vllm'"
    if which(argv[0]) is None:
        return f"{cmd!r}: the program {argv[0]!r} is not found on PATH"
    return None
