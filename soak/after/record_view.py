"""How the after-the-run readers read a record: through its models, leniently when another
soaktop version wrote it, and the record's open dicts through named accessors.

**Leniency.** ``compare``, ``runs`` and ``report`` show a record whose only problems are
keys this version does not declare or required keys the record lacks (another soaktop
version wrote it: :func:`soak.record.run_dir.unreadable_record`). :func:`read_leniently`
reads such a record (or a snapshot line) into the same models every other reader uses:

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

import copy
import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from soak.record.matrix import RepResult
from soak.record.models import RunRecord
from soak.record.sections import ReconciledWindow

M = TypeVar("M", bound=BaseModel)

VERSION_DIFFERENCES = frozenset({"missing", "extra_forbidden"})
"""Validation errors another soaktop version's record has (as ``unreadable_record`` says)."""

_MAX_PASSES = 8
"""Each pass fills one level of missing sections; records nest a few levels deep."""

Loc = tuple[int | str, ...]


class _Unreadable(Exception):
    """The error cannot be read past (no empty value, no list item to leave out)."""


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
    try:
        return model.model_validate(raw), None
    except ValidationError as e:
        first = e
    fixed = copy.deepcopy(dict(raw))
    errors = first.errors()
    for _ in range(_MAX_PASSES):
        locs = [tuple(err["loc"]) for err in errors]
        if any(err["type"] not in VERSION_DIFFERENCES for err in errors) or must_have & set(locs):
            return None, first
        try:
            _repair(model, fixed, locs, fills or {})
        except _Unreadable:
            return None, first
        try:
            return model.model_validate(fixed), first
        except ValidationError as e:
            errors = e.errors()
    return None, first


def _repair(
    model: type[BaseModel], raw: dict[str, Any], locs: list[Loc], fills: Mapping[Loc, Any]
) -> None:
    """Leave out the undeclared keys at ``locs``, fill the missing ones, and drop the list
    items that lack a required key (after the rest, from the end: indices stay true)."""
    dropped: dict[tuple[int, int], tuple[list[Any], int]] = {}
    for loc in locs:
        parent, key = _parent(raw, loc)
        annotation = _annotation(model, loc)
        if annotation is None:  # a key the model does not declare
            if isinstance(parent, dict):
                parent.pop(key, None)
        elif loc in fills:
            parent[key] = fills[loc]
        elif (item := _enclosing_item(raw, loc)) is not None:
            dropped[(id(item[0]), item[1])] = item
        elif (empty := _empty(annotation)) is not _NO_EMPTY:
            parent[key] = empty
        else:
            raise _Unreadable
    for items, index in sorted(dropped.values(), key=lambda d: d[1], reverse=True):
        del items[index]


def _parent(raw: Any, loc: Loc) -> tuple[Any, Any]:
    """The container holding ``loc``'s last key, and that key."""
    node = raw
    try:
        for part in loc[:-1]:
            node = node[part]
    except (KeyError, IndexError, TypeError):
        raise _Unreadable from None
    if not isinstance(node, dict | list):
        raise _Unreadable
    return node, loc[-1]


def _enclosing_item(raw: Any, loc: Loc) -> tuple[list[Any], int] | None:
    """The list and index of the innermost list item that holds ``loc`` (None: none)."""
    node, found = raw, None
    try:
        for part in loc[:-1]:
            if isinstance(node, list) and isinstance(part, int):
                found = (node, part)
            node = node[part]
    except (KeyError, IndexError, TypeError):
        raise _Unreadable from None
    return found


def _annotation(model: type[BaseModel], loc: Loc) -> Any:
    """The type the model declares at ``loc`` (None: the last key is not declared)."""
    tp: Any = model
    for i, part in enumerate(loc):
        tp = _without_none(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
            if part not in tp.model_fields:
                if i == len(loc) - 1:
                    return None
                raise _Unreadable
            tp = tp.model_fields[part].annotation
        elif get_origin(tp) is list and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and isinstance(part, str):
            tp = get_args(tp)[1]
        else:
            raise _Unreadable  # a union's branch, or a shape this reader does not know
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _without_none(tp: Any) -> Any:
    if _is_union(tp):
        rest = [a for a in get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


_NO_EMPTY = object()
_EMPTY_SCALARS: dict[Any, Any] = {str: "", bool: False, int: 0, float: 0.0}


def _empty(tp: Any) -> Any:
    """The empty value of a type, or ``_NO_EMPTY`` (a word: a Literal or an enum)."""
    if _is_union(tp) and type(None) in get_args(tp):
        return None
    origin = get_origin(tp)
    if origin is list:
        return []
    if origin is dict:
        return {}
    if tp is Any:
        return None
    if origin is Literal or (isinstance(tp, type) and issubclass(tp, Enum)):
        return _NO_EMPTY
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {}  # its own missing keys are filled on the next pass
    return _EMPTY_SCALARS.get(tp, _NO_EMPTY)


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
