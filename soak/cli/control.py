"""``soaktop control RUN_DIR --rate R | --concurrency N [--note TEXT]``: a live load step.

The headless twin of the monitor's ``+``/``-`` keys: it appends one ``set`` command to the
run's ``control.jsonl`` (:func:`soak.run.control.send_control`), which the runner reads at
its next snapshot tick and turns into a new load step with its own figures. It writes
nothing else and talks to the runner no other way; it refuses a run that is over (its
record is written, or its runner is gone), both targets at once, a target the run's loop
does not have (a rate for a closed loop, a concurrency for an open one, either for a
trace replay) and values out of the config's bounds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from soak.record.models import EXIT_USAGE
from soak.record.run_dir import RunDirError, load_run_config
from soak.run.control import live_runner_pid, send_control
from soak.safe_text import safe_text

RATE_MAX = 100_000.0
"""``RunConfig.rate``'s bound: requests/s."""
CONCURRENCY_MAX = 100_000
"""``RunConfig.concurrency``'s bound."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``control``."""
    p = sub.add_parser(
        "control",
        help="change a live run's rate or concurrency (a recorded load step)",
        description="Append a `set` command to RUN_DIR/control.jsonl: the runner starts a "
        "new load step at the next snapshot tick (its own phase and figures in the record).",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--rate", type=float, metavar="R", help="open loop: the new arrival rate, requests/s"
    )
    target.add_argument(
        "--concurrency", type=int, metavar="N", help="closed loop: the new number of workers"
    )
    p.add_argument("--note", default="", help="a note kept with the step's event")
    p.set_defaults(handler=cmd_control)


def target_problem(arrival: str, rate: float | None, concurrency: int | None) -> str | None:
    """Why this target cannot be sent to a run with that arrival model (None: it can)."""
    if arrival == "trace":
        flag = "--rate" if rate is not None else "--concurrency"
        return (
            f"{flag}: this run replays a trace (--arrival trace:FILE), whose own times set "
            "the load: neither its rate nor its concurrency can be changed live"
        )
    if rate is not None:
        if arrival == "closed":
            return "--rate: this run is a closed loop (--arrival closed); use --concurrency N"
        if not (math.isfinite(rate) and 0 < rate <= RATE_MAX):
            return f"--rate: {rate!r} is not allowed; a rate above 0 and at most {RATE_MAX:g}"
        return None
    if concurrency is None:
        return "give --rate R (open loop) or --concurrency N (closed loop)"
    if arrival != "closed":
        return f"--concurrency: this run is an open loop (--arrival {arrival}); use --rate R"
    if not 1 <= concurrency <= CONCURRENCY_MAX:
        return (
            f"--concurrency: {concurrency} is not allowed; a whole number from 1 to "
            f"{CONCURRENCY_MAX:,}"
        )
    return None


def cmd_control(ns: argparse.Namespace) -> int:
    """``soaktop control``: 0 when the command was appended, 2 (usage) otherwise."""
    run_dir: Path = ns.run_dir
    try:
        config = load_run_config(run_dir)
    except RunDirError as e:
        return _usage(str(e))
    if (run_dir / "record.json").exists():
        return _usage(f"{run_dir} is finished (its record.json is written): nothing to control")
    if live_runner_pid(run_dir) is None:
        return _usage(
            f"the runner of {run_dir} is not running (runner.pid names no live soaktop "
            "runner): nothing to control; soaktop recover writes its record"
        )
    arrival = str(config.get("arrival", "closed"))
    if (problem := target_problem(arrival, ns.rate, ns.concurrency)) is not None:
        return _usage(problem)
    fields: dict[str, float | int] = (
        {"rate": ns.rate} if ns.rate is not None else {"concurrency": ns.concurrency}
    )
    try:
        send_control(run_dir, "set", ns.note, **fields)
    except OSError as e:
        return _usage(f"cannot write {run_dir / 'control.jsonl'}: {e}")
    what = ", ".join(f"{k} {v:g}" for k, v in fields.items())
    print(f"soaktop control: asked {run_dir.name} for {what} (a new step at its next tick)")
    return 0


def _usage(message: str) -> int:
    print(f"soaktop control: {safe_text(message)}", file=sys.stderr)
    return EXIT_USAGE
