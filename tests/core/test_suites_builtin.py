"""The built-in probe suites load, hold what the seed protocol counts, and can terminate.

"Can terminate" is checked on the schemas themselves: every string is bounded (enum,
const, an anchored pattern of bounded length, or maxLength), every array has maxItems and
every object forbids extra properties, so a random-weights model under a grammar backend
cannot write past ``max_tokens``. A bad user suite file gets an error that names the file,
the field and the value.
"""

from __future__ import annotations

import json
from pathlib import Path
from re import _parser as sre_parse  # type: ignore[attr-defined]  # stdlib regex parser, no stub
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from probes.suite import BUILTIN_SUITES, Suite, SuiteError, load_suites

#: Room for the tool-call wrapper a parser expects (hermes: ``<tool_call>{"name": ...,
#: "arguments": ...}</tool_call>``), beyond the function name and the arguments.
TOOL_CALL_OVERHEAD = 40


@pytest.fixture(scope="module")
def suites() -> dict[str, Suite]:
    return load_suites(list(BUILTIN_SUITES), [])


def test_every_builtin_suite_loads_in_gate_order(suites: dict[str, Suite]) -> None:
    assert list(suites) == list(BUILTIN_SUITES)
    for name, s in suites.items():
        assert s.suite == name and s.kind == name and s.source == "builtin"
        assert s.tasks, name


def test_counts_match_the_seed_protocol(suites: dict[str, Suite]) -> None:
    # Seed 000 reports "24/24 strict JSON tasks and 8/8 tool calls".
    assert len(suites["json"].tasks) == 24
    assert len(suites["tools"].tasks) == 8
    assert len(suites["smoke"].tasks) == 1
    assert 1 <= len(suites["needle"].tasks) <= 2


def test_streamed_and_round_trip_suites_reuse_the_tool_tasks(suites: dict[str, Suite]) -> None:
    tools = suites["tools"].tasks
    assert suites["stream-tools"].tasks == tools
    assert suites["tool-result"].tasks == tools
    assert all(t.tool_result is not None for t in tools)


def test_task_ids_are_unique_and_readable(suites: dict[str, Suite]) -> None:
    for s in suites.values():
        ids = [t.id for t in s.tasks]
        assert len(set(ids)) == len(ids), s.suite
        assert all(t.prompt for t in s.tasks), s.suite


def _schemas(suites: dict[str, Suite]) -> list[tuple[str, dict[str, Any]]]:
    out = [(f"json/{t.id}", t.schema_) for t in suites["json"].tasks if t.schema_ is not None]
    for t in suites["tools"].tasks:
        for tool in t.tools:
            fn = tool["function"]
            out.append((f"tools/{t.id}/{fn['name']}", fn["parameters"]))
    return out


def test_every_schema_is_valid_draft_2020_12(suites: dict[str, Suite]) -> None:
    for where, schema in _schemas(suites):
        Draft202012Validator.check_schema(schema)  # raises SchemaError naming the keyword
        assert schema["type"] == "object", where


def _bound_problems(schema: dict[str, Any], where: str) -> list[str]:
    """Unbounded strings and arrays, and objects open to extra properties."""
    if "enum" in schema or "const" in schema:
        return []
    if "anyOf" in schema:
        return [
            p for i, s in enumerate(schema["anyOf"]) for p in _bound_problems(s, f"{where}|{i}")
        ]
    kind = schema.get("type")
    problems: list[str] = []
    if kind == "string":
        pattern = schema.get("pattern")
        if pattern is not None:
            # JSON Schema patterns search: without both anchors any text may surround them.
            if not (pattern.startswith("^") and pattern.endswith("$")):
                problems.append(f"{where}: pattern {pattern!r} is not anchored")
            if sre_parse.parse(pattern).getwidth()[1] >= sre_parse.MAXREPEAT:
                problems.append(f"{where}: pattern {pattern!r} has no length bound")
        elif "maxLength" not in schema:
            problems.append(f"{where}: string without enum, pattern or maxLength")
    elif kind == "array":
        if "maxItems" not in schema:
            problems.append(f"{where}: array without maxItems")
        problems += _bound_problems(schema["items"], f"{where}[]")
    elif kind == "object":
        if schema.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties is not false")
        if not set(schema.get("required", [])) <= set(schema["properties"]):
            problems.append(f"{where}: requires a property it does not define")
        for name, sub in schema["properties"].items():
            problems += _bound_problems(sub, f"{where}.{name}")
    elif kind in ("integer", "number"):
        has_lo = "minimum" in schema or "exclusiveMinimum" in schema
        has_hi = "maximum" in schema or "exclusiveMaximum" in schema
        if not (has_lo and has_hi):
            problems.append(f"{where}: number without both bounds")
    elif kind not in ("boolean", "null"):
        problems.append(f"{where}: unexpected type {kind!r}")
    return problems


def test_every_string_and_array_is_bounded(suites: dict[str, Suite]) -> None:
    problems = [p for where, s in _schemas(suites) for p in _bound_problems(s, where)]
    assert problems == []


def test_the_bound_checks_catch_open_schemas() -> None:
    open_schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "pattern": "^[a-z]+$"},
            "c": {"type": "string", "pattern": "[a-z]{3}"},
            "d": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        },
    }
    problems = _bound_problems(open_schema, "x")
    assert problems == [
        "x: additionalProperties is not false",
        "x.a: string without enum, pattern or maxLength",
        "x.b: pattern '^[a-z]+$' has no length bound",
        "x.c: pattern '[a-z]{3}' is not anchored",
        "x.d: array without maxItems",
        "x.d[]: number without both bounds",
    ]
    assert _worst_chars({"type": "array", "items": {"enum": ["ab"]}, "maxItems": 3}) == 16


def test_some_free_strings_are_there_on_purpose(suites: dict[str, Suite]) -> None:
    # maxLength-only strings are where a real grammar backend let raw control characters
    # through (REAL_VLLM_CPU.md); a handful keeps that contract failure reachable.
    def free(schema: dict[str, Any]) -> int:
        if schema.get("type") == "string":
            return int("maxLength" in schema and "pattern" not in schema and "enum" not in schema)
        if schema.get("type") == "object":
            return sum(free(s) for s in schema["properties"].values())
        if schema.get("type") == "array":
            return free(schema["items"])
        return 0

    n = sum(free(t.schema_) for t in suites["json"].tasks if t.schema_ is not None)
    assert 4 <= n <= 6


def _worst_chars(schema: dict[str, Any]) -> int:
    """The longest compact JSON text the schema allows (numbers: 7 fraction digits)."""
    if "enum" in schema:
        return max(len(json.dumps(v)) for v in schema["enum"])
    if "const" in schema:
        return len(json.dumps(schema["const"]))
    if "anyOf" in schema:
        return max(_worst_chars(s) for s in schema["anyOf"])
    kind = schema["type"]
    if kind == "string":
        widths: list[int] = [schema["maxLength"]] if "maxLength" in schema else []
        if "pattern" in schema:
            widths.append(sre_parse.parse(schema["pattern"]).getwidth()[1])
        return min(widths) + 2
    if kind in ("integer", "number"):
        keys = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        digits = max(len(str(int(abs(schema[k])))) for k in keys if k in schema)
        return 1 + digits + (0 if kind == "integer" else 8)
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "object":
        props = schema["properties"]
        body = sum(len(json.dumps(k)) + 1 + _worst_chars(v) for k, v in props.items())
        return 2 + body + max(len(props) - 1, 0)
    n: int = schema["maxItems"]
    return 2 + n * _worst_chars(schema["items"]) + max(n - 1, 0)


def test_worst_case_answer_fits_max_tokens(suites: dict[str, Suite]) -> None:
    # A token is at least one character, so the longest answer the schema allows, in
    # characters, bounds the tokens a grammar-constrained random model can write.
    too_long = []
    s = suites["json"]
    for t in s.tasks:
        cap = t.max_tokens or s.defaults["max_tokens"]
        assert t.schema_ is not None
        if _worst_chars(t.schema_) > cap:
            too_long.append((t.id, _worst_chars(t.schema_), cap))
    s = suites["tools"]
    for t in s.tasks:
        cap = t.max_tokens or s.defaults["max_tokens"]
        for tool in t.tools:
            fn = tool["function"]
            need = _worst_chars(fn["parameters"]) + len(fn["name"]) + TOOL_CALL_OVERHEAD
            if need > cap:
                too_long.append((f"{t.id}/{fn['name']}", need, cap))
    assert too_long == []


def test_tool_tasks_are_answerable_by_a_random_model(suites: dict[str, Suite]) -> None:
    # "required" with several tools lets a random model pick any of them: a false failure.
    # Several tools therefore come with a named tool_choice, and it names expect_function.
    choices = {"required": 0, "named": 0}
    for t in suites["tools"].tasks:
        assert 1 <= len(t.tools) <= 3, t.id
        for tool in t.tools:
            assert tool["type"] == "function" and tool["function"]["strict"] is True, t.id
            assert tool["function"]["description"], t.id
        if t.tool_choice == "required":
            choices["required"] += 1
            assert len(t.tools) == 1, t.id
        else:
            assert isinstance(t.tool_choice, dict), t.id
            choices["named"] += 1
            assert t.tool_choice == {"type": "function", "function": {"name": t.expect_function}}
        params = next(
            x["function"]["parameters"]
            for x in t.tools
            if x["function"]["name"] == t.expect_function
        )
        # Expected arguments must themselves be acceptable arguments.
        assert set(t.expect_arguments) <= set(params["properties"]), t.id
        for key, want in t.expect_arguments.items():
            assert Draft202012Validator(params["properties"][key]).is_valid(want), (t.id, key)
    assert choices["required"] >= 2 and choices["named"] >= 2


def test_expected_values_are_valid_answers(suites: dict[str, Suite]) -> None:
    # Each expected value must satisfy the sub-schema it points at; otherwise a capable
    # model answering correctly would fail the check.
    for t in suites["json"].tasks:
        assert t.expect, t.id
        assert t.schema_ is not None
        for pointer, want in t.expect.items():
            sub = t.schema_
            for part in pointer.lstrip("/").split("/"):
                sub = sub["items"] if part.isdigit() else sub["properties"][part]
            assert Draft202012Validator(sub).is_valid(want), (t.id, pointer, want)


def test_needle_and_smoke_tasks(suites: dict[str, Suite]) -> None:
    (smoke,) = suites["smoke"].tasks
    assert (smoke.max_tokens or suites["smoke"].defaults["max_tokens"]) <= 32
    for t in suites["needle"].tasks:
        assert t.needle and t.needle.isdigit() and t.needle not in t.prompt
        assert t.context_tokens is not None and 1000 <= t.context_tokens <= 8000


# -- errors in a user's suite file -------------------------------------------------------------
def _write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _error(path: Path) -> str:
    with pytest.raises(SuiteError) as info:
        load_suites([], [path])
    return str(info.value)


TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}


def test_bad_kind_names_file_field_and_value(tmp_path: Path) -> None:
    path = _write(tmp_path, "mine.json", {"suite": "mine", "kind": "jsn", "tasks": []})
    msg = _error(path)
    assert str(path) in msg and "kind" in msg and "'jsn'" in msg


def test_json_task_without_schema(tmp_path: Path) -> None:
    data = {"suite": "mine", "kind": "json", "tasks": [{"id": "bare", "prompt": "hi"}]}
    msg = _error(_write(tmp_path, "noschema.json", data))
    assert "noschema.json" in msg and "schema" in msg and "'bare'" in msg


def test_expect_function_not_among_tools(tmp_path: Path) -> None:
    task = {"id": "t1", "prompt": "time?", "tools": [TOOL], "expect_function": "get_date"}
    data = {"suite": "mine", "kind": "tools", "tasks": [task]}
    msg = _error(_write(tmp_path, "tools.json", data))
    assert "tools.json" in msg and "expect_function" in msg
    assert "'get_date'" in msg and "get_time" in msg


def test_duplicate_task_ids(tmp_path: Path) -> None:
    task = {"id": "same", "prompt": "x", "schema": {"type": "object"}}
    data = {"suite": "mine", "kind": "json", "tasks": [task, task]}
    msg = _error(_write(tmp_path, "dupes.json", data))
    assert "dupes.json" in msg and "ids" in msg and "same" in msg


def test_invalid_json_names_the_file_and_position(tmp_path: Path) -> None:
    msg = _error(_write(tmp_path, "broken.json", '{"suite": "mine", "kind": "json",'))
    assert "broken.json" in msg and "not valid JSON" in msg and "line 1" in msg


def test_bad_task_field_value_is_quoted(tmp_path: Path) -> None:
    task = {"id": "has space", "prompt": "x", "schema": {"type": "object"}, "max_tokens": 0}
    data = {"suite": "mine", "kind": "json", "tasks": [task]}
    msg = _error(_write(tmp_path, "fields.json", data))
    assert "tasks.0.id = 'has space'" in msg and "tasks.0.max_tokens = 0" in msg


def test_unreadable_file(tmp_path: Path) -> None:
    msg = _error(tmp_path / "missing.json")
    assert "missing.json" in msg and "cannot be read" in msg


def test_user_file_replaces_builtin_and_feeds_tasks_from(tmp_path: Path) -> None:
    task = {"id": "only", "prompt": "time?", "tools": [TOOL], "expect_function": "get_time"}
    path = _write(tmp_path, "t.json", {"suite": "tools", "kind": "tools", "tasks": [task]})
    got = load_suites(["tools", "stream-tools"], [path])
    assert got["tools"].source == str(path)
    assert [t.id for t in got["stream-tools"].tasks] == ["only"]
