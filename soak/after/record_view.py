"""How the after-the-run readers read a record: through its models, leniently when another
soaktop version wrote it, and the record's open dicts through named accessors.

**Leniency.** ``compare``, ``runs`` and ``report`` show a record whose only problems are
keys this version does not declare or required keys the record lacks (another soaktop
version wrote it: :func:`soak.record.run_dir.unreadable_record`). :func:`read_leniently`
reads such a record (or a snapshot line) into the same models every other reader uses,
through :func:`soak.record.lenient.read`:

- a key the model does not declare is left out (the readers name it, from the errors);
- an item of a list that lacks a key its model requires (a phase without ``start_s``, a
  reason without ``effect``) is left out: shown, it would say what the record does not;
- elsewhere a required key the record lacks reads as the ``fills`` given for it, else as
  its type's empty value (None where the type allows it, else ``""``, 0, False, an empty
  list or mapping, a section of defaults); a word without one (a Literal or an enum: a
  status) leaves the record unread;
- a value of the wrong type is damage, not another version: the record is not read.

**Open dicts.** ``config`` (the free-form echo of ``config.json``), an endpoint's
``cache_config`` (the engine's own labels) and a matrix repetition's ``reconciliation``
are read through :func:`config_value`, :func:`memory_target` and :func:`rep_window`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from soak.record.lenient import Loc, M, read
from soak.record.matrix import RepResult
from soak.record.models import RunRecord
from soak.record.sections import ReconciledWindow


def read_leniently(
    model: type[M],
    raw: Mapping[str, Any],
    fills: Mapping[Loc, Any] | None = None,
    *,
    must_have: frozenset[Loc] = frozenset(),
) -> tuple[M | None, ValidationError | None]:
    """``raw`` as ``model`` (see the module docstring), with the validation error of the
    first read (None: it validated as it was). The model is None when ``raw`` holds a
    value of the wrong type, or lacks a required word it has no ``fills`` for, or a key
    of ``must_have`` (a journal line's time: an invented one would be plotted)."""
    # Refuse a wrong type and drop a list item that lacks a key: a damaged record must
    # not be shown as another version's, nor a filled-in item say what the record does not.
    got = read(
        model, raw, on_wrong_type="refuse", on_item_missing="drop", fills=fills, must_have=must_have
    )
    return got.value, got.error


# --- the record's open dicts -----------------------------------------------------------


def config_value(record: RunRecord, key: str) -> Any:
    """One option of the run's configuration as the record echoes it (``config`` is left
    open in the record: ``soak.run.config`` owns its shape, and a record keeps whatever
    options the soaktop that wrote it had)."""
    return record.config.get(key)


def memory_target(cache_config: Mapping[str, str]) -> str | None:
    """vLLM's ``gpu_memory_utilization`` label of an endpoint's ``cache_config`` (the
    engine's own names; None where it has none)."""
    return cache_config.get("gpu_memory_utilization")


def rep_window(rep: RepResult) -> ReconciledWindow:
    """A matrix repetition's reconciliation (an open dict in the matrix model) as the
    record's window; an empty window when it holds something else."""
    try:
        return ReconciledWindow.model_validate(rep.reconciliation)
    except ValidationError:
        return ReconciledWindow()
