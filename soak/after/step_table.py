"""A stepped load's throughput–latency table: one row per step, the knee marked.

Read by the run's final report (``soaktop run`` / ``soaktop view``: :func:`step_lines`)
and by ``soaktop report`` (:func:`step_rows`): the same columns in both — the step, its
target, its measured span, completed requests and their rate, output tokens/s, TTFT and
E2E p99, goodput, and for an open loop the offered and achieved rates.
"""

from __future__ import annotations

from soak.record.models import LoadStep, RunRecord

STEP_HEADER = (
    "step",
    "target",
    "span s",
    "done",
    "req/s",
    "out tok/s",
    "TTFT p99 s",
    "E2E p99 s",
    "goodput req/s",
    "offered → achieved req/s",
)


def _target(step: LoadStep) -> str:
    if step.rate_start is not None:
        ends = {step.rate_start, step.rate_end}
        rate = (
            f"{step.rate_start:g}" if len(ends) == 1 else f"{step.rate_start:g} → {step.rate_end:g}"
        )
        return f"{rate} req/s"
    if step.concurrency_start is not None:
        c0, c1 = step.concurrency_start, step.concurrency_end
        return f"{c0}" if c0 == c1 else f"{c0} → {c1}"
    return "—"


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if v is None else fmt.format(v)


def step_rows(rec: RunRecord) -> list[tuple[str, ...]]:
    """One row per step (``STEP_HEADER``'s columns); the knee's label ends in ``(knee)``."""
    knee = rec.sweep.knee_step if rec.sweep is not None else None
    rows: list[tuple[str, ...]] = []
    for step in rec.steps:
        ld = step.load
        label = f"{step.index}: {step.label}" + (" (knee)" if step.index == knee else "")
        offered = (
            f"{_num(ld.offered_rate, '{:.1f}')} → {_num(ld.achieved_rate, '{:.1f}')}"
            if ld is not None and ld.offered_rate is not None
            else "—"
        )
        rows.append(
            (
                label,
                _target(step),
                _num(ld.issue_s if ld else None, "{:.1f}"),
                "—" if ld is None else str(ld.completed),
                _num(ld.requests_per_s if ld else None, "{:.2f}"),
                _num(ld.output_tokens_per_s if ld else None, "{:.1f}"),
                _num(ld.ttft_s.p99 if ld else None),
                _num(ld.e2e_s.p99 if ld else None),
                _num(step.goodput, "{:.2f}"),
                offered,
            )
        )
    return rows


def sweep_words(rec: RunRecord) -> str | None:
    """The sweep's SLO and knee in one sentence (None: no sweep)."""
    sw = rec.sweep
    if sw is None:
        return None
    slo = ", ".join(sw.slo) if sw.slo else "none (goodput = completed throughput)"
    knee = next((s for s in rec.steps if s.index == sw.knee_step), None)
    where = (
        f"step {knee.index} ({knee.label})"
        if knee is not None
        else "not reached (goodput still rose at the last step)"
    )
    return f"sweep of {sw.kind}: SLO {slo}; knee {where} — {sw.rule}"


def step_lines(rec: RunRecord, flag: str = "") -> list[str]:
    """The table as text lines for the final report (``flag``: ``(invalid)`` beside the
    figures of a run that is not a valid measurement)."""
    if not rec.steps:
        return []
    rows = [STEP_HEADER, *step_rows(rec)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(STEP_HEADER))]
    out = [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]
    if flag:
        out[0] += f"  {flag.strip()}"
    if (words := sweep_words(rec)) is not None:
        out.append(f"  {words}")
    return out
