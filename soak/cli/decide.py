"""``soaktop decide --before RUN --candidate RUN --restored RUN``: promote or retain.

The logic and the report live in :mod:`soak.after.decide` and its ``decide_*`` siblings;
this module is the parser and the handler. Exit codes: 0 when a decision was made
(promote or retain original), 2 for a usage error or runs that cannot be compared — a
restored run that is not the original among them, unless ``--allow-restoration-drift``
(the message says exactly what differs, both values named).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from soak.after.decide import decide
from soak.after.decide_model import (
    DEFAULT_MIN_WINS,
    MAX_OUTPUT_SPREAD,
    MIN_POOLED_REQUESTS,
    MIN_REPS,
    Decision,
    NotComparable,
    fmt_gain_limit,
)
from soak.after.decide_render import render
from soak.record.models import EXIT_USAGE, RunRecord, write_atomic
from soak.safe_text import safe_json, safe_text


def parse_gain(text: str) -> float:
    """``10%`` or ``10`` (percent) → 0.10; ``0.1`` alone is refused as ambiguous."""
    raw = text.strip()
    pct = raw.endswith("%")
    try:
        value = float(raw.rstrip("%").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage such as 10%") from None
    if not pct and 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is ambiguous: write {value * 100:g}% for a fraction of {value:g}, or "
            f"{value:g}% for {value:g} percent"
        )
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0% and below 100%")
    return value / 100


def parse_wins(text: str) -> int | None:
    """``all`` → None (every cell), else a whole number ≥ 1."""
    if text.strip().lower() == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'all'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return n


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``decide`` (dispatched through ``ns.handler``)."""
    p = sub.add_parser(
        "decide",
        help="promote a candidate or retain the original, from three matrix runs",
        description=(
            "Compare a candidate against the original measured before and after it "
            "(restored). The restored run must be the original (same model, endpoints, "
            "stated and declared recipe — version, slots, GPU memory, KV token slots, … — "
            "and GPU set), else the runs are refused. A cell is a material win when the "
            "candidate's pooled median E2E is at least --min-gain lower than both controls; "
            "it is inconclusive, never a win, when its controls are more than --min-gain "
            "apart, when the candidate's mean output length is more than "
            f"{fmt_gain_limit(MAX_OUTPUT_SPREAD)} from both controls', or when an arm has "
            f"fewer than {MIN_POOLED_REQUESTS} pooled requests or {MIN_REPS} repetitions. "
            "Promote when at least --min-wins cells win. Exit 0 when a decision was made, "
            "2 when the runs cannot be compared."
        ),
    )
    p.add_argument("--before", type=Path, required=True, metavar="RUN", help="original, before")
    p.add_argument("--candidate", type=Path, required=True, metavar="RUN", help="candidate run")
    p.add_argument(
        "--restored", type=Path, required=True, metavar="RUN", help="original, restored after"
    )
    p.add_argument(
        "--min-gain",
        type=parse_gain,
        default=0.10,
        metavar="PCT",
        help="how much lower the candidate's median E2E must be than each control "
        "(default 10%%; boundary included)",
    )
    p.add_argument(
        "--min-wins",
        type=parse_wins,
        default=DEFAULT_MIN_WINS,
        metavar="N|all",
        help=f"cells that must be material wins to promote (default {DEFAULT_MIN_WINS})",
    )
    p.add_argument(
        "--allow-different-prompts",
        action="store_true",
        help="compare even when the prompt pools differ (recorded as a caveat)",
    )
    p.add_argument(
        "--allow-restoration-drift",
        action="store_true",
        help="decide even when the restored run is not the original (another version, "
        "recipe, token slots, GPU set): a restoration_drift caveat, and the candidate is "
        "never promoted",
    )
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.add_argument(
        "--markdown", type=Path, metavar="FILE", help="also write a markdown report to FILE"
    )
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML page (bar charts per cell, tables) to FILE",
    )
    p.set_defaults(handler=cmd_decide)


def _load(role: str, run_dir: Path) -> RunRecord | str:
    from soak.record.run_dir import RunDirError, load_run_record

    if run_dir.is_dir() and not (run_dir / "record.json").exists():
        return (
            f"the {role} run {run_dir} has no record.json (still running? soaktop attach; "
            "a runner that died? soaktop recover)"
        )
    try:
        return load_run_record(run_dir)
    except RunDirError as e:  # what is damaged, the same words as view, verify, recover
        return f"the {role} run: {e}"


def cmd_decide(ns: argparse.Namespace) -> int:
    """``soaktop decide``."""
    dirs = {"before": ns.before, "candidate": ns.candidate, "restored": ns.restored}
    loaded = {role: _load(role, d) for role, d in dirs.items()}
    errors = [v for v in loaded.values() if isinstance(v, str)]
    if errors:
        for e in errors:
            print(f"soaktop decide: {safe_text(e)}", file=sys.stderr)
        return EXIT_USAGE
    recs = {role: v for role, v in loaded.items() if isinstance(v, RunRecord)}
    try:
        d = decide(
            recs["before"],
            recs["candidate"],
            recs["restored"],
            min_gain=ns.min_gain,
            min_wins=ns.min_wins,
            allow_different_prompts=ns.allow_different_prompts,
            run_dirs={role: str(p) for role, p in dirs.items()},
            allow_restoration_drift=ns.allow_restoration_drift,
        )
    except NotComparable as e:
        print("soaktop decide: these runs cannot be compared:", file=sys.stderr)
        for problem in e.problems:
            print(f"  - {safe_text(problem)}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as e:
        print(f"soaktop decide: {safe_text(e)}", file=sys.stderr)
        return EXIT_USAGE
    if ns.markdown is not None:
        try:
            write_atomic(ns.markdown, render(d, markdown=True).encode())
        except OSError as e:
            print(f"soaktop decide: cannot write {ns.markdown}: {e}", file=sys.stderr)
            return EXIT_USAGE
    html = getattr(ns, "html", None)
    if html is not None and (html_error := _write_html(d, html)) is not None:
        print(f"soaktop decide: {safe_text(html_error)}", file=sys.stderr)
        return EXIT_USAGE
    # render() made its text display-safe; the JSON keeps every string, \u-escaped.
    print(
        safe_json(d.model_dump_json(indent=2)) if ns.json else render(d),
        end="" if not ns.json else "\n",
    )
    if ns.markdown is not None and not ns.json:
        print(f"markdown report: {ns.markdown}")
    if html is not None:
        # stdout stays pure JSON under --json
        print(f"html report: {html}", file=sys.stderr if ns.json else sys.stdout)
    return 0


def _write_html(d: Decision, path: Path) -> str | None:
    """Write the ``--html`` page; the problem in words when it cannot be written."""
    from soak.after.report import ReportError
    from soak.after.report.bars import write_page
    from soak.after.report.decide_page import build_decide_page

    try:
        write_page(path, build_decide_page(d))
    except ReportError as e:
        return str(e)
    except OSError as e:
        return f"cannot write {path}: {e.strerror or e}"
    return None
