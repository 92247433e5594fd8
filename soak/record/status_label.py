"""How a run's status reads wherever its figures are shown: the one place that decides it.

A run is a valid load measurement only when it is PASSED or FAILED (DESIGN.md §6: FAILED
measured what it meant to and failed a check). Every other run's throughput and latency
figures carry its status in brackets — ``4,237.158 (invalid)`` — in the CLI summary,
``summary.csv``, ``soaktop runs`` (and ``--csv``), ``compare`` and ``report``: a figure
from a run that did not measure what it meant to is never shown as if it had.

The verdict keeps the strongest effect (aborted > invalid > failed), but an INVALID run
can *also* have failed as a server attempt (a GPU fault, a failed gate). Seed 000 keeps
both ("invalid as a load measurement and failed as a server attempt"), so the label does
too: ``INVALID + FAILED``. The client defect that invalidated the load does not explain
the server failure away, and the server failure does not repair the missing measurement.
"""

from __future__ import annotations

from collections.abc import Iterable

from soak.record.models import RunRecord

VALID_STATUSES = frozenset({"PASSED", "FAILED"})
"""The statuses whose figures are a valid load measurement."""

_NOT_MEASURED = frozenset({"INVALID", "ABORTED"})


def label_of(status: str, effects: Iterable[str]) -> str:
    """``INVALID + FAILED`` when an INVALID (or ABORTED) run also has a ``failed``-effect
    reason; the status itself otherwise (readers' own words, ``running``, pass through)."""
    if status in _NOT_MEASURED and "failed" in set(effects):
        return f"{status} + FAILED"
    return status


def status_label(record: RunRecord) -> str:
    """The record's status as every output labels it (``PASSED``, ``INVALID + FAILED``)."""
    return label_of(record.status.value, (r.effect for r in record.reasons))


def valid_status(status: str) -> bool:
    """True for PASSED and FAILED: the run measured what it meant to."""
    return status in VALID_STATUSES


def figures_valid(record: RunRecord) -> bool:
    """True when the record's throughput and latency figures are a valid measurement."""
    return valid_status(record.status.value)


def figure_flag(status: str) -> str:
    """What a figure of a run with this status carries: ``""`` for a valid run, else
    `` (invalid)`` / `` (aborted)`` (any other word in brackets, lower case)."""
    return "" if valid_status(status) else f" ({status.lower()})"


def flagged(status: str, text: str, empty: tuple[str, ...] = ("", "—")) -> str:
    """``text`` with the flag of ``status`` (nothing to flag in an empty cell)."""
    return text if text in empty else text + figure_flag(status)


def status_words(record: RunRecord) -> str:
    """The label in a sentence, as seed 000 puts it: ``invalid as a load measurement and
    failed as a server attempt``; ``passed recorded checks``, ``failed a check`` …"""
    status = record.status.value
    also_failed = any(r.effect == "failed" for r in record.reasons)
    if status == "PASSED":
        return "passed recorded checks"
    if status == "FAILED":
        return "a valid measurement that failed a check"
    what = (
        "invalid as a load measurement"
        if status == "INVALID"
        else "aborted, not a complete load measurement"
    )
    return what + (" and failed as a server attempt" if also_failed else "")
