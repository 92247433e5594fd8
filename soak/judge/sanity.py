"""The load's sanity reason: how many HTTP 200 answers were garbage (``loadgen.sanity``).

Every completed load response was checked at its end (empty, runaway whitespace,
repetition, a finish reason not asked for); the load summary counts the flagged ones.
Above ``max_share`` of the completed responses, and from ``SANITY_MIN_FLAGGED`` of them,
the run FAILS: the server answered "OK" with something no client can use. Fewer is a
note. A run whose checks were off (``--no-sanity``, or a record older than the checks)
gets no sanity reason at all: its zero would not mean "none degenerate".
"""

from __future__ import annotations

from soak.judge.limits import SANITY_MIN_FLAGGED
from soak.record.models import LoadSummary, Reason


def sanity_reasons(load: LoadSummary | None, max_share: float) -> list[Reason]:
    """The ``load_sanity`` reason of a checked load with flagged responses (else none)."""
    if load is None or not load.sanity_checked or not load.sanity_flagged or not load.completed:
        return []
    share = load.sanity_flagged / load.completed
    failed = share > max_share and load.sanity_flagged >= SANITY_MIN_FLAGGED
    by_flag = ", ".join(
        f"{n:,} {flag}"
        for flag, n in sorted(load.sanity_by_flag.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    words = (
        f"{load.sanity_flagged:,} of {load.completed:,} load responses ({_percent(share)}) "
        f"were degenerate with HTTP 200: {by_flag}"
    )
    if failed:
        words += f" (allowed: {_percent(max_share)})"
    elif share > max_share:
        words += f"; fewer than {SANITY_MIN_FLAGGED} responses: a note, not a verdict"
    else:
        words += f"; within the {_percent(max_share)} allowed"
    return [Reason(code="load_sanity", effect="failed" if failed else "note", message=words)]


def _percent(share: float) -> str:
    """``7.6 %``; a share above 0 never reads as 0."""
    pct = share * 100
    if 0 < pct < 0.1:
        return "<0.1 %"
    return f"{pct:.1f} %" if pct < 10 else f"{pct:.0f} %"
