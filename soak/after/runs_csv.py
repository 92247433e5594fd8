"""``soaktop runs --csv FILE``: the many-run results CSV that seed 000 keeps beside its
JSON ("The results CSV carries the concise measurements with their status labels").

One row per run directory of the folder: the run row of its ``summary.csv``
(:mod:`soak.record.summary_csv`: the same columns, figures flagged when the run is not a
valid measurement, ``status_label`` saying ``INVALID + FAILED`` where that is so), then
the run's recipe in one line and its directory. A run without a readable record still has
its row: its status (``running``, ``no record``, ``unreadable``) and why, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from soak.after.compare_headers import recipe_headline
from soak.after.run_view import RunView
from soak.record.summary_csv import SUMMARY_COLUMNS, csv_bytes, summary_rows

RUNS_CSV_COLUMNS = (*SUMMARY_COLUMNS, "recipe", "path")
"""``summary.csv``'s columns, then the recipe headline and the run directory."""


def runs_row(view: RunView) -> dict[str, str]:
    """One run's row (its ``summary.csv`` run row when it has a record)."""
    if view.record is None:
        row = dict.fromkeys(RUNS_CSV_COLUMNS, "")
        row |= {
            "run_id": view.run_id,
            "status": view.status,
            "status_label": view.label,
            "row": "run",
            "reasons": " | ".join(view.problems),
            "path": str(view.path),
        }
        return row
    row = summary_rows(view.record, cells=False)[0]
    if view.status == "?":  # a record that does not say its verdict (read as INVALID)
        row |= {"status": "?", "status_label": "?"}
    return row | {"recipe": recipe_headline(view.record.identity), "path": str(view.path)}


def runs_csv(views: Sequence[RunView]) -> bytes:
    """The CSV of these runs, in the order given; every cell through ``safe_csv_cell``."""
    return csv_bytes(RUNS_CSV_COLUMNS, [runs_row(v) for v in views])
