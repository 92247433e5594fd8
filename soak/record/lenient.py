"""Reading a JSON object into the model its writer used, keeping what can be kept.

Every reader of a run directory reads the record, a journal line or an event's data
through the writer's own models (``RunRecord``, ``Snapshot``, ``Event``). An object this
version's models accept is validated once, as it is. One they do not (another soaktop
version wrote it, a hand edit, damage) is mended and validated again, a few passes at
most (:data:`MAX_PASSES`), by :func:`read`:

- a key the model does not declare is left out (the caller names it, from the error);
- a required key the object lacks reads as the caller's ``fills`` for it, else as its
  type's "no data" placeholder: None where the type allows it, else ``""``, 0, False, an
  empty list or mapping, or a section whose own required keys are filled on the next
  pass. A word (a Literal or an enum: a status) has no placeholder, since any word would
  be invented: the list item that lacks it is left out, and outside a list item nothing
  is read;
- an error at ``schema_version`` is another major version, whose keys may mean other
  things: nothing is read.

What else a problem means depends on who reads, and each caller says so:
``on_wrong_type``, ``on_item_missing``, ``fills`` and ``must_have`` (see :func:`read`).
The monitor (``tui``) reads with ``on_wrong_type="drop"``, ``on_item_missing="fill"``;
``compare``, ``runs``, ``report`` and the headless follower
(``soak.after.record_view.read_leniently``) with ``"refuse"`` and ``"drop"``.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

Loc = tuple[int | str, ...]
"""Where a value is inside an object: its keys and list indices, as pydantic says."""

_Item = tuple[list[Any], int]
"""A list item: the list and its index."""

WrongType = Literal["drop", "refuse"]
ItemMissing = Literal["fill", "drop"]

VERSION_DIFFERENCES = frozenset({"missing", "extra_forbidden"})
"""The validation errors another soaktop version's object has (keys added or dropped);
any other is a value of the wrong type."""

MAX_PASSES = 8
"""Mend-and-validate rounds: each fixes every error pydantic reported, and filling a
missing section can reveal the errors inside it, one nesting level a round."""

_NO_FILL = object()
"""No placeholder: a word (any one would be invented), or a type this reader cannot find."""


@dataclass(frozen=True, slots=True)
class Lenient(Generic[M]):
    """What :func:`read` made of an object: the model (None: not read) and the first
    validation's error (None: it validated as it was)."""

    value: M | None
    error: ValidationError | None = None

    @property
    def repaired(self) -> bool:
        """Read, but only once mended."""
        return self.value is not None and self.error is not None


@dataclass(frozen=True, slots=True)
class _Policy:
    on_wrong_type: WrongType
    on_item_missing: ItemMissing
    fills: Mapping[Loc, Any]
    must_have: frozenset[Loc]


def read(
    model: type[M],
    data: bytes | Mapping[str, Any],
    *,
    on_wrong_type: WrongType,
    on_item_missing: ItemMissing,
    fills: Mapping[Loc, Any] | None = None,
    must_have: frozenset[Loc] = frozenset(),
) -> Lenient[M]:
    """``data`` (one JSON object's bytes, or one already parsed: it is left as it is) as
    ``model``, mended as the module docstring says when it does not validate as it is.

    ``on_wrong_type``: a value of the wrong type (or one whose key cannot be followed,
    through a union). ``"drop"`` leaves it out, the value or the list item it is, and its
    field then reads as its default or placeholder: the monitor's, since it must show
    what it can of a live line, and one odd value must not blank the screen. ``"refuse"``
    reads nothing: compare, runs and report's, since a wrong type is damage, not another
    version, and read past it a damaged record would be shown as another version's.

    ``on_item_missing``: a list item that lacks a required key. ``"fill"`` gives the key
    its placeholder: the monitor's, so that the item shows what it has. ``"drop"`` leaves
    the item out: compare and report's, since shown filled (a phase without ``start_s``,
    a reason without ``effect``) it would say what the record does not.

    ``fills``: what a missing key at exactly that location reads as, before any
    placeholder (compare: a record without ``status`` reads as ``INVALID``).

    ``must_have``: locations where any problem, missing or wrong, refuses the object (a
    journal line's time: an invented one would be plotted)."""
    try:
        if isinstance(data, bytes):
            return Lenient(model.model_validate_json(data))
        return Lenient(model.model_validate(data))
    except ValidationError as e:
        first = e
    obj = _mutable_copy(data)
    if not isinstance(obj, dict):
        return Lenient(None, first)
    policy = _Policy(on_wrong_type, on_item_missing, fills or {}, must_have)
    errors = first
    for _ in range(MAX_PASSES):
        if not _repair(model, obj, errors, policy):
            return Lenient(None, first)
        try:
            return Lenient(model.model_validate(obj), first)
        except ValidationError as e:
            errors = e
    return Lenient(None, first)


def _mutable_copy(data: bytes | Mapping[str, Any]) -> object:
    """A copy of ``data`` to mend (the caller's object stays as it was)."""
    if isinstance(data, bytes):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
    return copy.deepcopy(dict(data))


def _repair(
    model: type[BaseModel], obj: dict[str, Any], error: ValidationError, policy: _Policy
) -> bool:
    """Mend every error of ``error`` in ``obj``; False when one cannot be read past.

    List items are deleted last, each once and from the end, so that no index another
    error names moves before it is used."""
    found = error.errors(include_url=False, include_context=False, include_input=False)
    errors = [(tuple(err["loc"]), err["type"]) for err in found]
    if any(loc[:1] == ("schema_version",) or loc in policy.must_have for loc, _ in errors):
        return False
    if policy.on_wrong_type == "refuse" and any(k not in VERSION_DIFFERENCES for _, k in errors):
        return False
    doomed: dict[tuple[int, int], _Item] = {}
    for loc, kind in errors:
        mended = _fix(model, obj, loc, kind, policy)
        if mended is False:
            return False
        if mended is not True:
            doomed[(id(mended[0]), mended[1])] = mended
    for items, index in sorted(doomed.values(), key=lambda d: d[1], reverse=True):
        del items[index]
    return True


def _fix(
    model: type[BaseModel], obj: dict[str, Any], loc: Loc, kind: str, policy: _Policy
) -> _Item | bool:
    """Mend one error in place (True), or name the list item to leave out, or say that it
    cannot be read past (False)."""
    path, node = _walk(obj, loc)
    if kind == "missing" and path == loc[:-1] and isinstance(node, dict):
        item = _enclosing_item(obj, loc)
        if loc in policy.fills:
            node[loc[-1]] = policy.fills[loc]
        elif item is not None and policy.on_item_missing == "drop":
            return item
        elif (fill := _placeholder(_type_at(model, loc))) is not _NO_FILL:
            node[loc[-1]] = fill
        else:
            return item if item is not None else False
        return True
    if kind == "extra_forbidden" and path == loc:
        return _leave_out(obj, path)
    if policy.on_wrong_type == "refuse" or not path:
        return False  # not followed to its key; or the object itself: nothing holds it
    return _leave_out(obj, path)


def _walk(obj: Any, loc: Loc) -> tuple[Loc, Any]:
    """How far ``loc`` leads into ``obj`` (pydantic adds union member names to a location;
    they are not keys) and what is there."""
    node, depth = obj, 0
    for seg in loc:
        in_dict = isinstance(node, dict) and isinstance(seg, str) and seg in node
        in_list = isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)
        if not (in_dict or in_list):
            break
        node, depth = node[seg], depth + 1
    return loc[:depth], node


def _leave_out(obj: dict[str, Any], path: Loc) -> _Item | bool:
    """Leave out what is at ``path``: a key at once (True), a list item later (named)."""
    parent = _walk(obj, path[:-1])[1]
    if isinstance(parent, list) and isinstance(path[-1], int):
        return parent, path[-1]
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
    return True


def _enclosing_item(obj: dict[str, Any], loc: Loc) -> _Item | None:
    """The list and index of the innermost list item that holds ``loc`` (None: none)."""
    items = [i for i, seg in enumerate(loc[:-1]) if isinstance(seg, int)]
    if not items:
        return None
    parent = _walk(obj, loc[: items[-1]])[1]
    index = loc[items[-1]]
    return (parent, index) if isinstance(parent, list) and isinstance(index, int) else None


def _members(tp: Any) -> tuple[Any, ...]:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return (tp,)


def _type_at(model: type[BaseModel], loc: Loc) -> Any:
    """The annotation of what ``loc`` points to inside ``model`` (``_NO_FILL``: unknown)."""
    tp: Any = model
    for seg in loc:
        steps = [_step(member, seg) for member in _members(tp)]
        tp = next((t for t in steps if t is not None), None)
        if tp is None:
            return _NO_FILL
    return tp


def _step(tp: Any, seg: int | str) -> Any:
    """The annotation one key or index into ``tp`` (None: it has no such key)."""
    origin = get_origin(tp)
    if isinstance(seg, int) and origin is list:
        return get_args(tp)[0]
    if isinstance(seg, str) and origin is dict:
        return get_args(tp)[1]
    if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(seg, str):
        field = tp.model_fields.get(seg)
        return None if field is None else field.annotation
    return None


_EMPTY_SCALARS: dict[Any, Any] = {str: "", bool: False, int: 0, float: 0.0}


def _placeholder(tp: Any) -> Any:
    """ "No data" for a required key of type ``tp`` the object lacks (``_NO_FILL``: none)."""
    members = _members(tp)
    if type(None) in members or tp is Any:
        return None
    if len(members) > 1 or tp is _NO_FILL:
        return _NO_FILL  # which member it was would be invented
    origin = get_origin(tp)
    if origin is Literal or (isinstance(tp, type) and issubclass(tp, Enum)):
        return _NO_FILL
    if origin is list:
        return []
    if origin is dict or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return {}  # a section: its own missing keys are filled on the next pass
    return _EMPTY_SCALARS.get(tp, _NO_FILL)
