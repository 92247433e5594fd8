"""Contract checks on what a probe got back: strict JSON, JSON Schema, tool calls.

Each check returns ``None`` when the contract holds, else the reason in words. These are
*contract* failures (the server answered, but not what the contract promises), never
availability failures.

Strict JSON means RFC 8259 and nothing more: no NaN/Infinity, no raw control character
inside a string (a real vLLM/xgrammar bug lets them through ``maxLength`` strings), no
duplicate keys, nothing after the value. Schemas are checked with the ``jsonschema``
library (Draft 2020-12 unless the schema names another draft), formats included.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

_MAX_REASON = 240


class StrictJSONError(ValueError):
    """Content that a strict JSON parser refuses."""


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise StrictJSONError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _shorten(text: str, limit: int = _MAX_REASON) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


TOO_DEEP = "arrays or objects nested too deeply to check"
"""Why an answer nested past Python's recursion limit fails: a contract failure of the
server's answer (the words of ``loadgen.answer_contract``), never a crash of the probe."""


def parse_strict(text: str) -> Any:
    """Parse ``text`` as strict JSON; raise :class:`StrictJSONError` saying why not."""
    try:
        # json.loads is strict about control characters by default (strict=True).
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except StrictJSONError:
        raise
    except RecursionError:  # ~1,000 nested levels: the server's answer, not soaktop's bug
        raise StrictJSONError(TOO_DEEP) from None
    except json.JSONDecodeError as e:
        near = text[max(0, e.pos - 20) : e.pos + 20]
        what = e.msg.removesuffix(" at")  # "Unterminated string starting at" + our "at char"
        if "control character" in e.msg.lower() and e.pos < len(text):
            what = f"raw control character U+{ord(text[e.pos]):04X} inside a string"
        raise StrictJSONError(f"{what} at char {e.pos} (near {near!r})") from None


def check_schema(value: Any, schema: dict[str, Any]) -> str | None:
    """Why ``value`` does not validate against ``schema`` (None when it does)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        return f"the probe's own schema is invalid: {e.message}"
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except RecursionError:  # a recursive schema walking a hostile, deeply nested value
        return f"{TOO_DEEP} against the schema"
    if not errors:
        return None
    first = errors[0]
    where = "/" + "/".join(str(p) for p in first.absolute_path)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return _shorten(f"schema violation at {where}: {first.message}{more}")


def _pointer_get(doc: Any, pointer: str) -> tuple[bool, Any]:
    """RFC 6901 lookup: (found, value)."""
    if pointer in ("", "/"):
        return True, doc
    cur = doc
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` and ``false`` is not ``0`` (Python says they are)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check_expected(value: Any, expect: dict[str, Any]) -> str | None:
    """Why ``value`` lacks an expected value (JSON pointer → value), if it does."""
    for pointer, want in expect.items():
        found, got = _pointer_get(value, pointer)
        if not found:
            return f"expected {pointer} = {want!r}, but it is missing"
        if not same_json(got, want):
            return _shorten(f"expected {pointer} = {want!r}, got {got!r}")
    return None


def check_json_content(
    content: str | None, schema: dict[str, Any], expect: dict[str, Any] | None
) -> str | None:
    """The json probe's contract on the message content."""
    if content is None or content == "":
        return "no content in the answer"
    try:
        value = parse_strict(content)
    except StrictJSONError as e:
        return _shorten(f"not strict JSON: {e}")
    return check_schema(value, schema) or (check_expected(value, expect) if expect else None)


def check_tool_calls(
    calls: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    expect_function: str,
    expect_arguments: dict[str, Any] | None,
) -> str | None:
    """The tools probe's contract: exactly one call of ``expect_function`` whose arguments
    parse strictly and validate against that function's parameters schema."""
    if not calls:
        return f"no tool call (expected {expect_function})"
    if len(calls) != 1:
        names = ", ".join(str(c.get("function", {}).get("name")) for c in calls)
        return f"{len(calls)} tool calls ({names}); expected exactly one {expect_function}"
    fn = calls[0].get("function") or {}
    name = fn.get("name")
    if name != expect_function:
        return f"called {name!r}, expected {expect_function!r}"
    raw = fn.get("arguments")
    if not isinstance(raw, str):
        return f"arguments of {name} are not a JSON string ({type(raw).__name__})"
    try:
        args = parse_strict(raw)
    except StrictJSONError as e:
        return _shorten(f"arguments of {name} are not strict JSON: {e}")
    params = next(
        (t["function"].get("parameters") for t in tools if t["function"].get("name") == name),
        None,
    )
    if params is not None and (why := check_schema(args, params)):
        return f"arguments of {name}: {why}"
    if expect_arguments:
        for key, want in expect_arguments.items():
            if not isinstance(args, dict) or key not in args or not same_json(args[key], want):
                got = args.get(key) if isinstance(args, dict) else args
                return _shorten(f"argument {key} of {name}: expected {want!r}, got {got!r}")
    return None
