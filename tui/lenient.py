"""Reading a journal line into the model its writer used, keeping what can be kept.

The monitor reads what the runner writes through the runner's own models (a snapshot line
is a :class:`~soak.record.snapshot.Snapshot`, ``record.json`` a ``RunRecord``, an
``events.jsonl`` line an ``Event``). A line this version's models accept is validated
once, straight from its bytes. One they do not (a value of the wrong type, a key a newer
minor version added where this one forbids unknown keys, a hand-edited file) must not
blank the screen: :func:`parse` drops what does not validate — the value, or the list
item that holds it — and fills a required field that is then missing with its "no data"
placeholder (None where allowed, else an empty text or list, 0), then validates again.
What comes back is still the model, flagged ``repaired``. A line of another major
version, or one nothing can be kept of, is ``None``: the caller skips and counts it.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

MAX_PASSES = 8
"""Repair rounds: each one fixes every error pydantic reported, and filling a missing
section can reveal the errors inside it, one nesting level a round."""

_NO_FILL = object()
"""A missing field with no placeholder (a ``Literal``: any word would be invented)."""

Loc = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class Parsed(Generic[M]):
    """A line read into ``model``: its value (None: unreadable) and whether it had to be
    repaired first."""

    value: M | None
    repaired: bool = False


def parse(model: type[M], raw: bytes) -> Parsed[M]:
    """``raw`` (one JSON object) as ``model``; repaired when it does not validate as is."""
    try:
        return Parsed(model.model_validate_json(raw))
    except ValidationError:
        pass
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Parsed(None)
    return _mend(model, obj)


def validate(model: type[M], obj: object) -> Parsed[M]:
    """``obj`` (parsed JSON, left as it is) as ``model``; repaired like :func:`parse`."""
    try:
        return Parsed(model.model_validate(obj))
    except ValidationError:
        pass
    try:
        copied = orjson.loads(orjson.dumps(obj))
    except TypeError:  # not JSON's kinds of value
        return Parsed(None)
    return _mend(model, copied)


def _mend(model: type[M], obj: object) -> Parsed[M]:
    """``obj`` (a fresh copy: it is changed) as ``model``, dropping and filling until it
    validates."""
    if not isinstance(obj, dict):
        return Parsed(None)
    for _ in range(MAX_PASSES):
        try:
            return Parsed(model.model_validate_json(orjson.dumps(obj)), repaired=True)
        except ValidationError as e:
            errors = e.errors(include_url=False, include_context=False, include_input=False)
        if any(err["loc"][:1] == ("schema_version",) for err in errors):
            return Parsed(None)  # another major version: its keys may mean other things
        # Deepest and last first, so that dropping a list item never shifts another
        # error's index.
        locs = sorted(((tuple(err["loc"]), err["type"]) for err in errors), key=_order)
        if not all(_fix(model, obj, loc, kind) for loc, kind in reversed(locs)):
            return Parsed(None)
    return Parsed(None)


def _order(item: tuple[Loc, str]) -> tuple[tuple[int, int | str], ...]:
    # list indices compare as numbers, keys as text (one container holds one kind)
    return tuple((0, seg) if isinstance(seg, int) else (1, seg) for seg in item[0])


def _fix(model: type[BaseModel], obj: dict[str, Any], loc: Loc, kind: str) -> bool:
    """Mend one error in place; False when nothing can be done about it."""
    path, node = _walk(obj, loc)
    if kind == "missing" and path == loc[:-1] and isinstance(node, dict):
        fill = _placeholder(_type_at(model, loc))
        if fill is not _NO_FILL:
            node[loc[-1]] = fill
            return True
        return _drop_item(obj, loc)
    if not path:
        return False  # the object itself: nothing to drop it from
    return _drop(obj, path)


def _walk(obj: Any, loc: Loc) -> tuple[Loc, Any]:
    """How far ``loc`` leads into ``obj`` (pydantic adds union member names to a location;
    they are not keys) and what is there."""
    node, path = obj, 0
    for seg in loc:
        in_dict = isinstance(node, dict) and isinstance(seg, str) and seg in node
        in_list = isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node)
        if not (in_dict or in_list):
            break
        node, path = node[seg], path + 1
    return loc[:path], node


def _drop(obj: dict[str, Any], path: Loc) -> bool:
    parent = _walk(obj, path[:-1])[1]
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif isinstance(parent, list) and isinstance(path[-1], int):
        del parent[path[-1]]
    return True


def _drop_item(obj: dict[str, Any], loc: Loc) -> bool:
    """Drop the list item that holds ``loc`` (an item missing a word it cannot do without)."""
    items = [i for i, seg in enumerate(loc) if isinstance(seg, int)]
    return bool(items) and _drop(obj, loc[: items[-1] + 1])


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
    origin = get_origin(tp)
    if isinstance(seg, int) and origin in (list, tuple):
        return get_args(tp)[0]
    if isinstance(seg, str) and origin is dict:
        return get_args(tp)[1]
    if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(seg, str):
        field = tp.model_fields.get(seg)
        return None if field is None else field.annotation
    return None


def _placeholder(tp: Any) -> Any:
    """ "No data" for a required field of type ``tp`` the line lacks."""
    members = _members(tp)
    if type(None) in members:
        return None
    tp = members[0]
    origin = get_origin(tp)
    if origin is Literal or tp is _NO_FILL:
        return _NO_FILL
    if origin in (list, tuple):
        return []
    if origin is dict or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return {}
    fills: dict[Any, Any] = {str: "", bool: False, int: 0, float: 0.0}
    return fills.get(tp, _NO_FILL)
