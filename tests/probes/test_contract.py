"""Contract checks and SSE assembly, judged the way an operator reads a failed probe.

Pure unit tests: no server. Every reason must say what broke in words (and where), since
that text is what lands in the verdict and the evidence file.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from probes.contract import (
    StrictJSONError,
    check_expected,
    check_json_content,
    check_schema,
    check_tool_calls,
    parse_strict,
)
from probes.sse_events import parse_sse_events
from probes.suite import builtin_suite

# -- strict JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_char", "code"),
    [
        ("\x01", "U+0001"),
        ("\n", "U+000A"),
        ("\t", "U+0009"),
        ("\x1f", "U+001F"),
        ("\x00", "U+0000"),
    ],
)
def test_raw_control_character_in_a_string_is_refused_and_named(raw_char: str, code: str) -> None:
    text = '{"title": "Quarterly' + raw_char + 'review"}'
    with pytest.raises(StrictJSONError) as e:
        parse_strict(text)
    assert "control character" in str(e.value)
    assert code in str(e.value)
    why = check_json_content(text, {"type": "object"}, None)
    assert why is not None
    assert why.startswith("not strict JSON")
    assert "control character" in why and code in why


def test_escaped_control_character_is_fine() -> None:
    assert parse_strict('{"title": "a\\u0001b\\n"}') == {"title": "a\x01b\n"}


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(const: str) -> None:
    text = '{"total": ' + const + "}"
    with pytest.raises(StrictJSONError) as e:
        parse_strict(text)
    assert const in str(e.value)
    why = check_json_content(text, {"type": "object"}, None)
    assert why is not None and "not strict JSON" in why and const in why


@pytest.mark.parametrize(
    "text",
    ['{"a": 1, "a": 2}', '{"outer": {"k": true, "k": false}}', '[{"x": 1}, {"y": 1, "y": 2}]'],
)
def test_duplicate_keys_are_refused_at_any_depth(text: str) -> None:
    with pytest.raises(StrictJSONError, match="duplicate key"):
        parse_strict(text)
    why = check_json_content(text, {}, None)
    assert why is not None and "duplicate key" in why


@pytest.mark.parametrize("text", ['{"a": 1} x', '{"a": 1}{"b": 2}', '{"a": 1},', "[1] ]"])
def test_trailing_garbage_is_refused(text: str) -> None:
    with pytest.raises(StrictJSONError, match="Extra data"):
        parse_strict(text)


def test_surrounding_whitespace_is_valid_json() -> None:
    assert parse_strict(' \n{"a": [1, 2.5, "x", null, true]}\n ') == {
        "a": [1, 2.5, "x", None, True]
    }


def test_reason_for_cut_short_json_points_near_the_break() -> None:
    why = check_json_content('{"street": "Linden', {"type": "object"}, None)
    assert why is not None
    assert why.startswith("not strict JSON")
    assert "Linden" in why  # the excerpt shows where it broke


def test_reason_for_unterminated_string_reads_cleanly() -> None:
    why = check_json_content('{"street": "Linden', {"type": "object"}, None)
    assert why is not None
    assert " at at " not in why


def test_empty_or_missing_content_is_a_contract_failure() -> None:
    assert check_json_content(None, {}, None) == "no content in the answer"
    assert check_json_content("", {}, None) == "no content in the answer"


def test_reason_is_bounded() -> None:
    why = check_json_content('{"a": "' + "x" * 5000 + '", "a": 1}', {}, None)
    assert why is not None and len(why) <= 240


# -- JSON Schema -----------------------------------------------------------------------------

INVOICE = builtin_suite("json").tasks[0]
assert INVOICE.id == "invoice" and INVOICE.schema_ is not None
GOOD_INVOICE: dict[str, Any] = {
    "invoice_id": "INV-2041",
    "issue_date": "2026-03-14",
    "currency": "EUR",
    "lines": [
        {"sku": "WID-0001", "quantity": 3, "unit_price": 4.5},
        {"sku": "BOL-0420", "quantity": 10, "unit_price": 0.25},
    ],
    "total": 16,
    "paid": False,
}


def test_valid_document_passes_schema_and_expected_values() -> None:
    assert INVOICE.schema_ is not None
    text = orjson.dumps(GOOD_INVOICE).decode()
    assert check_json_content(text, INVOICE.schema_, INVOICE.expect) is None


def test_schema_violation_names_the_json_path() -> None:
    assert INVOICE.schema_ is not None
    bad = {**GOOD_INVOICE, "lines": [{"sku": "wid-1", "quantity": 3, "unit_price": 4.5}]}
    why = check_schema(bad, INVOICE.schema_)
    assert why is not None
    assert why.startswith("schema violation at /lines/0/sku:")
    assert "wid-1" in why


def test_missing_required_key_at_the_root_names_the_key() -> None:
    assert INVOICE.schema_ is not None
    bad = {k: v for k, v in GOOD_INVOICE.items() if k != "paid"}
    why = check_schema(bad, INVOICE.schema_)
    assert why == "schema violation at /: 'paid' is a required property"


def test_several_violations_report_the_first_path_and_a_count() -> None:
    assert INVOICE.schema_ is not None
    bad = {**GOOD_INVOICE, "currency": "XXX", "total": -1, "paid": "no"}
    why = check_schema(bad, INVOICE.schema_)
    assert why is not None
    assert why.startswith("schema violation at /currency:")
    assert why.endswith("(+2 more)")


def test_formats_are_checked() -> None:
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}
    assert check_schema({"d": "2026-03-14"}, schema) is None
    why = check_schema({"d": "2026-13-45"}, schema)
    assert why is not None and "/d" in why and "date" in why


def test_extra_property_is_a_violation() -> None:
    assert INVOICE.schema_ is not None
    why = check_schema({**GOOD_INVOICE, "note": "x"}, INVOICE.schema_)
    assert why is not None and "'note'" in why


def test_an_invalid_probe_schema_is_blamed_on_the_probe() -> None:
    why = check_schema({}, {"type": "no-such-type"})
    assert why is not None and why.startswith("the probe's own schema is invalid")


def test_schema_reason_is_bounded() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 1}}}
    why = check_schema({"s": "y" * 2000}, schema)
    assert why is not None and len(why) <= 240 and why.endswith("…")


# -- expected values (JSON pointers) ---------------------------------------------------------


def test_expected_value_mismatch_names_pointer_and_both_values() -> None:
    why = check_expected(GOOD_INVOICE, {"/lines/1/quantity": 11})
    assert why == "expected /lines/1/quantity = 11, got 10"


def test_expected_value_missing() -> None:
    assert check_expected(GOOD_INVOICE, {"/lines/5/sku": "X"}) == (
        "expected /lines/5/sku = 'X', but it is missing"
    )
    assert check_expected(GOOD_INVOICE, {"/nope": 1}) == "expected /nope = 1, but it is missing"


def test_expected_value_pointer_escapes() -> None:
    doc = {"a/b": {"m~n": 1}}
    assert check_expected(doc, {"/a~1b/m~0n": 1}) is None
    assert check_expected(doc, {"/a~1b/m~0n": 2}) == "expected /a~1b/m~0n = 2, got 1"


def test_expected_values_only_checked_when_asked() -> None:
    assert INVOICE.schema_ is not None
    other = {**GOOD_INVOICE, "invoice_id": "INV-9999"}
    text = orjson.dumps(other).decode()
    assert check_json_content(text, INVOICE.schema_, None) is None
    why = check_json_content(text, INVOICE.schema_, INVOICE.expect)
    assert why == "expected /invoice_id = 'INV-2041', got 'INV-9999'"


@pytest.mark.parametrize(("got", "want"), [(0, False), (1, True), (True, 1)])
def test_expected_value_does_not_conflate_booleans_and_numbers(got: Any, want: Any) -> None:
    assert check_expected({"v": got}, {"/v": want}) is not None


# -- tool calls ------------------------------------------------------------------------------

WEATHER = builtin_suite("tools").tasks[0]
assert WEATHER.expect_function == "get_weather"


def call(name: str, arguments: Any, cid: str = "call_1") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def check(calls: list[dict[str, Any]], expect: dict[str, Any] | None = None) -> str | None:
    return check_tool_calls(calls, WEATHER.tools, "get_weather", expect)


def test_one_good_call_passes() -> None:
    good = call("get_weather", {"city": "Paris", "unit": "celsius"})
    assert check([good]) is None
    assert check([good], WEATHER.expect_arguments) is None


def test_no_tool_call() -> None:
    assert check([]) == "no tool call (expected get_weather)"


def test_two_tool_calls() -> None:
    a = call("get_weather", {"city": "Paris", "unit": "celsius"}, "c1")
    b = call("get_weather", {"city": "Rome", "unit": "celsius"}, "c2")
    assert (
        check([a, b]) == "2 tool calls (get_weather, get_weather); expected exactly one get_weather"
    )


def test_wrong_function_name() -> None:
    why = check([call("get_forecast", {"city": "Paris", "unit": "celsius"})])
    assert why == "called 'get_forecast', expected 'get_weather'"


@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Paris", "unit": "celsius"', "city=Paris", '{"city": NaN, "unit": "celsius"}'],
)
def test_arguments_not_strict_json(arguments: str) -> None:
    why = check([call("get_weather", arguments)])
    assert why is not None and why.startswith("arguments of get_weather are not strict JSON")


def test_arguments_with_raw_control_character() -> None:
    why = check([call("get_weather", '{"city": "Pa\x01ris", "unit": "celsius"}')])
    assert why is not None and "control character U+0001" in why


def test_arguments_as_an_object_instead_of_a_string() -> None:
    c = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": {}}}
    assert check([c]) == "arguments of get_weather are not a JSON string (dict)"


def test_arguments_missing_a_required_key() -> None:
    why = check([call("get_weather", {"city": "Paris"})])
    assert why == "arguments of get_weather: schema violation at /: 'unit' is a required property"


def test_arguments_violating_a_nested_rule_name_the_path() -> None:
    why = check([call("get_weather", {"city": "Paris", "unit": "kelvin"})])
    assert why is not None
    assert why.startswith("arguments of get_weather: schema violation at /unit:")
    assert "kelvin" in why


def test_arguments_not_an_object() -> None:
    why = check([call("get_weather", [{"city": "Paris", "unit": "celsius"}])])
    assert why is not None and "schema violation at /" in why and "object" in why


def test_expected_argument_mismatch() -> None:
    rome = call("get_weather", {"city": "Rome", "unit": "celsius"})
    assert check([rome]) is None  # valid call; the value only matters when asked
    assert check([rome], WEATHER.expect_arguments) == (
        "argument city of get_weather: expected 'Paris', got 'Rome'"
    )


# -- SSE assembly ----------------------------------------------------------------------------


def sse(*events: Any, done: bool = True, eol: str = "\n") -> str:
    """A chat-completions SSE body: each event a JSON object (or a raw string)."""
    blocks = [f"data: {e if isinstance(e, str) else orjson.dumps(e).decode()}" for e in events]
    if done:
        blocks.append("data: [DONE]")
    return "".join(b + eol + eol for b in blocks)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


USAGE = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


def tool_delta(
    index: int, *, cid: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    d: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if cid:
        d |= {"id": cid, "type": "function"}
        d["function"]["name"] = name
    return chunk({"tool_calls": [d]})


def test_tool_call_deltas_merge_by_index_across_chunks() -> None:
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        tool_delta(0, cid="call_a", name="get_weather"),
        tool_delta(1, cid="call_b", name="get_time"),
        tool_delta(0, args='{"city": '),
        tool_delta(1, args='{"tz": "UTC"}'),
        tool_delta(0, args='"Paris", "unit": '),
        tool_delta(0, args='"celsius"}'),
        chunk(finish="tool_calls"),
        USAGE,
    )
    asm = parse_sse_events(body)
    assert asm.done and asm.error is None and asm.malformed is None
    assert asm.finish_reason == "tool_calls"
    calls = asm.tool_calls()
    assert [c["id"] for c in calls] == ["call_a", "call_b"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert orjson.loads(calls[0]["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert calls[1]["function"]["arguments"] == '{"tz": "UTC"}'
    # The assembled single call is judged like a non-streamed one.
    assert check([calls[0]], WEATHER.expect_arguments) is None
    assert check(calls) is not None and "2 tool calls" in (check(calls) or "")


def test_tool_call_indices_out_of_order_come_back_sorted() -> None:
    asm = parse_sse_events(
        sse(tool_delta(2, cid="c2", name="b", args="{}"), tool_delta(0, cid="c0", name="a"))
    )
    assert [c["id"] for c in asm.tool_calls()] == ["c0", "c2"]


@pytest.mark.parametrize("eol", ["\r\n", "\r", "\n"])
def test_line_endings(eol: str) -> None:
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello"}),
        chunk({"content": " there"}, finish="stop"),
        USAGE,
        eol=eol,
    )
    asm = parse_sse_events(body)
    assert asm.content == "Hello there"
    assert asm.done and asm.finish_reason == "stop"
    assert asm.usage == USAGE["usage"]
    assert asm.malformed is None and asm.error is None


def test_comments_and_multiline_data_fields() -> None:
    body = (
        ": keep-alive\n\n"
        'data: {"choices": [{"index": 0,\n'
        'data: "delta": {"content": "hi"}, "finish_reason": null}]}\n\n'
        "data:[DONE]\n\n"
    )
    asm = parse_sse_events(body)
    assert asm.content == "hi" and asm.done and asm.malformed is None


def test_error_object_inside_a_200_stream() -> None:
    err = {"error": {"message": "CUDA error: an illegal memory access", "type": "x", "code": 500}}
    asm = parse_sse_events(sse(chunk({"content": "Hel"}), err))
    assert asm.error == "CUDA error: an illegal memory access"
    assert asm.content == "Hel"


def test_old_vllm_error_object_inside_a_200_stream() -> None:
    err = {"object": "error", "message": "engine dead", "type": "InternalServerError"}
    asm = parse_sse_events(sse(err, done=False))
    assert asm.error == "engine dead"


def test_event_error() -> None:
    body = sse(chunk({"content": "a"}), done=False) + "event: error\ndata: upstream went away\n\n"
    asm = parse_sse_events(body)
    assert asm.error == "upstream went away"
    assert asm.content == "a"


def test_first_error_is_kept() -> None:
    body = sse({"error": {"message": "first"}}, {"error": {"message": "second"}})
    assert parse_sse_events(body).error == "first"


def test_malformed_json_event() -> None:
    asm = parse_sse_events(sse(chunk({"content": "a"}), '{"id":', chunk({"content": "b"})))
    assert asm.malformed is not None
    assert "not JSON" in asm.malformed and '{"id":' in asm.malformed
    assert asm.content == "ab" and asm.done


def test_event_that_is_not_an_object_is_malformed() -> None:
    asm = parse_sse_events(sse("[1, 2]"))
    assert asm.malformed is not None and "not an object" in asm.malformed


def test_missing_done() -> None:
    asm = parse_sse_events(sse(chunk({"content": "cut"}), done=False))
    assert not asm.done
    assert asm.content == "cut"
    assert parse_sse_events("").done is False


def test_usage_chunk_with_empty_choices_keeps_content_and_finish() -> None:
    asm = parse_sse_events(sse(chunk({"content": "ok"}, finish="length"), USAGE))
    assert asm.usage == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    assert asm.content == "ok" and asm.finish_reason == "length"
    assert asm.tool_calls() == []


def test_reasoning_deltas_are_kept_apart_from_content() -> None:
    asm = parse_sse_events(
        sse(
            chunk({"reasoning": "let me "}),
            chunk({"reasoning_content": "think"}),
            chunk({"content": "42"}),
        )
    )
    assert asm.reasoning == "let me think" and asm.content == "42"


@pytest.mark.parametrize(
    "event",
    [
        {"choices": [None]},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": None}]}}]},
    ],
    ids=["choice-null", "delta-string", "content-number", "tool-index-null"],
)
def test_event_of_the_wrong_shape_is_malformed_not_a_crash(event: dict[str, Any]) -> None:
    asm = parse_sse_events(sse(event))
    assert asm.malformed is not None


def test_an_answer_nested_past_the_parsers_depth_is_a_contract_failure_not_a_crash() -> None:
    """2 KB of ``[`` is ~1,000 levels: json.loads raises RecursionError, which escaped the
    gate's parse as soaktop's own crash instead of the server's broken answer."""
    from probes.contract import TOO_DEEP, StrictJSONError, check_schema, parse_strict

    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(StrictJSONError, match="nested too deeply"):
        parse_strict(deep)
    nested: object = 1
    for _ in range(5000):  # a value a recursive schema walks as deep as it goes
        nested = {"a": nested}
    node = {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}}
    schema = {"$defs": {"n": {"anyOf": [{"type": "integer"}, node]}}, "$ref": "#/$defs/n"}
    assert check_schema(nested, schema) == f"{TOO_DEEP} against the schema"
