"""``summary.csv``: the run's concise measurements with their status labels (seed 000:
"The results CSV carries the concise measurements with their status labels").

One row for the run and, for a matrix run, one row per cell after it. Every row carries
the run's ``status`` and ``status_label`` (``INVALID + FAILED`` when an invalid run also
failed as a server attempt: :mod:`soak.record.status_label`), and every throughput and
latency figure of a run that is not a valid measurement carries its flag:
``4237.158 (invalid)``. A spreadsheet then reads such a figure as text, not as a number
to average with the valid ones — which is the point.

The columns of earlier soaktops keep their names and order; new ones are added at the end.
``soaktop runs --csv`` writes the same rows for a folder of runs (plus the recipe).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence

from soak.record.matrix import CellResult
from soak.record.models import RunRecord
from soak.record.status_label import flagged, status_label
from soak.safe_text import safe_csv_cell

SUMMARY_COLUMNS = (
    "run_id",
    "status",
    "requested_concurrency",
    "workers_started",
    "completed_requests",
    "load_failures",
    "elapsed_incl_drain_s",
    "output_tokens_per_s",
    "p99_ttft_s",
    "p99_e2e_s",
    "gates",
    "reasons",
    # added with the status labels (issue 15): after the columns above, never between
    "status_label",
    "row",
    "cell",
    "e2e_median_s",
    "e2e_p50_nearest_s",
    "ttft_content_median_s",
    "input_tokens_mean",
    "output_tokens_mean",
)
"""The columns, in order: ``row`` is ``run`` or ``cell``; ``cell`` the matrix cell
(``~6000 / C4``); the median columns are a cell's pooled figures."""


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def summary_rows(record: RunRecord, cells: bool = True) -> list[dict[str, str]]:
    """The run's row, then (``cells``) one per matrix cell; figures flagged by status."""
    load, status = record.load, record.status.value
    gates = "; ".join(
        f"{phase} {suite} {res.passed}/{res.total}"
        for phase, suites in record.gates.items()
        for suite, res in suites.items()
    )
    row = dict.fromkeys(SUMMARY_COLUMNS, "")
    row |= {
        "run_id": record.run_id,
        "status": status,
        "requested_concurrency": str(load.requested_concurrency) if load else "",
        "workers_started": str(load.workers_started) if load else "",
        "completed_requests": str(load.completed) if load else "",
        "load_failures": str(load.failed) if load else "",
        "elapsed_incl_drain_s": _fmt(load.elapsed_s if load else None),
        "output_tokens_per_s": flagged(status, _fmt(load.output_tokens_per_s if load else None)),
        "p99_ttft_s": flagged(status, _fmt(load.ttft_s.p99 if load else None)),
        "p99_e2e_s": flagged(status, _fmt(load.e2e_s.p99 if load else None)),
        "gates": gates or "not run",
        "reasons": " | ".join(r.message for r in record.reasons),
        "status_label": status_label(record),
        "row": "run",
    }
    rows = [row]
    if cells and record.matrix is not None:
        rows += [_cell_row(row, c) for c in record.matrix.cells]
    return rows


def _cell_row(run_row: Mapping[str, str], cell: CellResult) -> dict[str, str]:
    status = run_row["status"]
    out = dict.fromkeys(SUMMARY_COLUMNS, "")
    out |= {
        "run_id": run_row["run_id"],
        "status": status,
        "status_label": run_row["status_label"],
        "row": "cell",
        "cell": cell.label,
        "requested_concurrency": str(cell.concurrency),
        "completed_requests": str(cell.completed),
        "load_failures": str(cell.failed),
        "e2e_median_s": flagged(status, _fmt(cell.e2e_median_s)),
        "e2e_p50_nearest_s": flagged(status, _fmt(cell.e2e_p50_nearest_s)),
        "ttft_content_median_s": flagged(status, _fmt(cell.ttft_content_median_s)),
        "input_tokens_mean": _fmt(cell.input_tokens_mean),
        "output_tokens_mean": _fmt(cell.output_tokens_mean),
    }
    return out


def csv_bytes(columns: Sequence[str], rows: Iterable[Mapping[str, object]]) -> bytes:
    """A header and the rows, every cell through ``safe_csv_cell``: reasons quote the
    server, so no escape reaches a terminal that cats the file and no cell runs as a
    spreadsheet formula. Numbers soaktop wrote pass unchanged."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: safe_csv_cell(row.get(k, "")) for k in columns})
    return buf.getvalue().encode()


def summary_csv(record: RunRecord) -> bytes:
    """``summary.csv`` of one record: the run's row and its matrix cells' rows."""
    return csv_bytes(SUMMARY_COLUMNS, summary_rows(record))
