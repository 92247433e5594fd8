"""How a contract fault breaks an answer that is otherwise served normally.

These are the failures a strict probe must classify as *contract*, not *availability*:
the HTTP status is 200, the stream is well formed and usage matches what was sent, but the
JSON content or the tool call is wrong. Each helper changes the planned value or text
before it is cut into tokens, so streamed and non-streamed answers carry the same fault.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

JSON_FAULTS = frozenset({"json_control_char", "json_invalid"})
"""Fault actions that break the JSON content of a structured-output answer."""
TOOL_FAULTS = frozenset({"tool_wrong_function", "tool_bad_arguments"})
"""Fault actions that break the (first) tool call of an answer."""

CONTROL_CHAR = "\x01"
"""What ``json_control_char`` puts inside a string: raw, not escaped as ``\\u0001``."""

# A private-use character never produced by the generators; orjson writes it unescaped, so
# it marks the spot for the raw control character in the serialised text.
_MARK = "\ue000"


def _mark_string(s: str) -> str:
    # Replace the middle character (keeps a maxLength bound, as in the real xgrammar bug).
    k = len(s) // 2
    return s[:k] + _MARK + s[k + 1 :]


def _mark_first_value(value: Any) -> tuple[Any, bool]:
    """``value`` with its first string value marked, and whether there was one."""
    if isinstance(value, str):
        return _mark_string(value), True
    if isinstance(value, list):
        for i, item in enumerate(value):
            marked, done = _mark_first_value(item)
            if done:
                return [*value[:i], marked, *value[i + 1 :]], True
    if isinstance(value, dict):
        for key, item in value.items():
            marked, done = _mark_first_value(item)
            if done:
                return {**value, key: marked}, True
    return value, False


def with_control_char(value: Any) -> str:
    """``value`` as compact JSON with a raw control character inside its first string.

    The first string value gets it; without one, the first key of an object; JSON with no
    string at all gets it right after its first character (still not strict JSON).
    """
    marked, done = _mark_first_value(value)
    if not done and isinstance(value, dict) and value:
        first = next(iter(value))
        marked = {(_mark_string(k) if k == first else k): v for k, v in value.items()}
        done = True
    text = orjson.dumps(marked).decode()
    if done:
        return text.replace(_MARK, CONTROL_CHAR, 1)
    return text[:1] + CONTROL_CHAR + text[1:]


def cut_short(text: str) -> str:
    """The first half of a JSON text, never itself valid JSON (an answer that stopped early).

    Half of an object or array never parses; half of a bare number might, so it gets a
    dangling comma.
    """
    cut = text[: max(len(text) // 2, 1)]
    try:
        orjson.loads(cut)
    except orjson.JSONDecodeError:
        return cut
    return cut + ","


def wrong_function(
    name: str, tools: list[dict[str, Any]], rng: random.Random
) -> tuple[str, dict[str, Any]]:
    """Another function than ``name``: (its name, its parameters schema).

    One of the request's other tools when it has any (a plausible mix-up, with arguments
    that fit that tool); else a made-up function with the asked one's parameters.
    """
    others = [f for f in tools if f.get("name") != name]
    if others:
        fn = rng.choice(others)
        return str(fn.get("name", "")), fn.get("parameters") or {"type": "object"}
    asked = next((f for f in tools if f.get("name") == name), {})
    return f"{name}_v2", asked.get("parameters") or {"type": "object"}


def break_arguments(args: Any, params: dict[str, Any]) -> Any:
    """Arguments that still parse but break ``params``.

    A required key is dropped; with nothing required, a key the schema forbids is added;
    and where neither breaks it, the arguments are not an object at all.
    """
    if isinstance(args, dict):
        for key in params.get("required") or ():
            if key in args:
                return {k: v for k, v in args.items() if k != key}
        extra = "unexpected_argument"
        if params.get("additionalProperties") is False and extra not in (
            params.get("properties") or {}
        ):
            return {**args, extra: True}
    return [args]
