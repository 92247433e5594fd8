"""Verdict reasons of a matrix run (a scout): failures, batches that never started,
cells that never ran. Finalize, recover and verify all call :func:`matrix_reasons`."""

from __future__ import annotations

from soak.record.matrix import MatrixSummary
from soak.record.models import Reason


def matrix_reasons(summary: MatrixSummary, max_failures: int, aborted: bool) -> list[Reason]:
    """Verdict reasons of a matrix run: failed requests (warm-up included: the server
    failed them) FAIL it beyond ``max_failures``; a cell that never ran is INVALID unless
    the operator stopped the run (the abort says so); a clean matrix is a note."""
    out: list[Reason] = []
    timed = sum(c.completed + c.failed for c in summary.cells)
    failed = sum(c.failed for c in summary.cells)
    warm_failed = sum(c.warmup_failed for c in summary.cells)
    if failed + warm_failed > max_failures:
        by: dict[str, int] = {}
        for c in summary.cells:
            for r in c.reps:
                for cls, n in r.failures_by_class.items():
                    by[cls] = by.get(cls, 0) + n
        where = "; ".join(f"{c.label} {c.failed}" for c in summary.cells if c.failed)
        detail = ", ".join(f"{n} {cls}" for cls, n in sorted(by.items()))
        out.append(
            Reason(
                code="matrix_failures",
                effect="failed",
                message=f"matrix: {failed} of {timed} timed requests failed"
                + (f" ({detail}; by cell: {where})" if failed else "")
                + (f"; {warm_failed} warm-up requests failed" if warm_failed else ""),
            )
        )
    elif timed:
        out.append(
            Reason(
                code="matrix_clean",
                effect="note",
                message=f"matrix: 0 failures in {timed:,} timed requests "
                f"({_count(len(summary.cells), 'cell')} × {_count(summary.spec.reps, 'rep')} × "
                f"{_count(summary.spec.requests, 'request')})",
            )
        )
    if summary.barrier_failures:
        out.append(
            Reason(
                code="matrix_barrier_not_reached",
                effect="invalid",
                message="matrix: batches that never started: "
                + "; ".join(summary.barrier_failures[:3])
                + (
                    f" (+{len(summary.barrier_failures) - 3} more)"
                    if len(summary.barrier_failures) > 3
                    else ""
                ),
            )
        )
    if summary.not_run:
        out.append(
            Reason(
                code="matrix_cut_short",
                effect="note" if aborted else "invalid",
                message=f"matrix: {len(summary.not_run)} cell(s) never ran: "
                + ", ".join(summary.not_run),
            )
        )
    return out


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
