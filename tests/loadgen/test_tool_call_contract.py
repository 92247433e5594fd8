"""A mix's tool-call class held to the tools gate's standard (issue 16 §2): the SSE parser
keeps the tool-call deltas of such a request only, merged per index across chunks and
reads, bounded, and hostile deltas never crash it; the contract names what is wrong with
the first bad call (an undeclared function, arguments not strict JSON, a schema
violation), and a tool whose parameters are no valid schema is refused before the run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.answer_contract import AnswerContract, ContractError
from loadgen.sse import SSEParser
from loadgen.tool_call_text import MAX_CALLS, TOOL_CALLS_MAX_BYTES, ToolCallText
from soak.run.config_mix import read_mix

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}  # no parameters: any object
TOOLS = [WEATHER, TIME]


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One chunk framed as vLLM sends it (the captured shape of tests/loadgen/test_sse.py)."""
    obj = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "tiny",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _tool_delta(index: Any, **fields: Any) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"index": index, **fields}]}


def _head(index: int, name: str, call_id: str = "call-0") -> bytes:
    fn = {"name": name, "arguments": ""}
    return _event(_tool_delta(index, id=call_id, type="function", function=fn))


def _args(index: int, fragment: str) -> bytes:
    return _event(_tool_delta(index, function={"arguments": fragment}))


_END = (
    _event({}, "tool_calls")
    + b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7,'
    b'"total_tokens":16}}\n\n'
    b"data: [DONE]\n\n"
)


def _pieces(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` fragments, as a tool parser streams arguments."""
    step = max(1, -(-len(text) // n))
    return [text[i : i + step] for i in range(0, len(text), step)]


def _stream(*events: bytes) -> bytes:
    first = _event({"role": "assistant", "content": ""})
    return first + b"".join(events) + _END


def _parse(body: bytes, reads: list[int] | None = None) -> SSEParser:
    """``body`` fed to a parser that keeps tool calls, in reads of the given sizes."""
    parser = SSEParser(True, None, ToolCallText())
    at = 0
    for size in reads or [len(body)]:
        parser.feed(body[at : at + size])
        at += size
    parser.feed(body[at:])
    parser.close()
    return parser


def _check(parser: SSEParser, contract: AnswerContract | None = None) -> str | None:
    contract = contract or AnswerContract.tool_call(TOOLS, "required")
    return contract.check(parser.text, parser.finish_reason, parser.calls)


ARGS = '{"city": "Paris", "days": 3}'


@pytest.mark.parametrize("seed", range(8))
def test_arguments_split_across_many_chunks_and_reads_are_assembled_whole(seed: int) -> None:
    rng = random.Random(seed)
    body = _stream(_head(0, "get_weather"), *(_args(0, p) for p in _pieces(ARGS, 9)))
    reads = [rng.randint(1, 40) for _ in range(len(body) // 10)]  # any split, 1-byte reads too
    parser = _parse(body, reads)
    assert parser.done and parser.failure is None
    assert parser.calls is not None
    (call,) = parser.calls.calls()
    assert (call.index, call.id, call.name, call.arguments) == (0, "call-0", "get_weather", ARGS)
    assert _check(parser) is None


def test_two_parallel_calls_are_kept_apart_and_each_is_checked() -> None:
    interleaved = [_head(0, "get_weather", "a"), _head(1, "get_time", "b")]
    for w, t in zip(_pieces(ARGS, 4), _pieces('{"tz": "UTC"}', 4), strict=True):
        interleaved += [_args(0, w), _args(1, t)]
    parser = _parse(_stream(*interleaved))
    assert parser.calls is not None
    calls = parser.calls.calls()
    assert [(c.index, c.id, c.name, c.arguments) for c in calls] == [
        (0, "a", "get_weather", ARGS),
        (1, "b", "get_time", '{"tz": "UTC"}'),
    ]
    assert _check(parser) is None
    # the second call breaks its tool's schema: its words, not the first call's
    bad = _parse(
        _stream(
            _head(0, "get_weather"), _args(0, ARGS), _head(1, "get_weather", "b"), _args(1, "{}")
        )
    )
    assert _check(bad) == (
        "tool call 1 get_weather: schema violation at /: 'city' is a required property"
    )


@pytest.mark.parametrize(
    ("name", "arguments", "finish", "why"),
    [
        ("get_weather", '{"city": 7}', "tool_calls",
         "tool call 0 get_weather: schema violation at /city: 7 is not of type 'string'"),
        ("get_weather", '{"city": "Oslo", "unit": "C"}', "tool_calls",
         "tool call 0 get_weather: schema violation at /: Additional properties are not allowed"),
        ("get_weather", '{"city": "a", "city": "b"}', "tool_calls",
         "tool call 0 get_weather: arguments not strict JSON: duplicate key 'city'"),
        ("get_weather", '{"city": "Rome", "days": NaN}', "tool_calls",
         "tool call 0 get_weather: arguments not strict JSON: NaN is not JSON"),
        ("get_weather", '{"city": "Ro', "length",
         "tool call 0 get_weather: arguments not strict JSON (finish_reason 'length': "
         "max_tokens ended it): Unterminated string"),
        ("get_weather", "", "tool_calls",
         "tool call 0 get_weather: arguments not strict JSON: Expecting value at char 0"),
        ("get_time", "[1]", "tool_calls",
         "tool call 0 get_time: arguments not a JSON object (list)"),
        ("rm_rf", "{}", "tool_calls",
         "tool call 0 names 'rm_rf', not a declared tool (declared: get_weather, get_time)"),
        ("", "{}", "tool_calls", "tool call 0 has no function name"),
    ],
)  # fmt: skip
def test_a_broken_call_is_named_with_what_is_wrong(
    name: str, arguments: str, finish: str, why: str
) -> None:
    events = [_head(0, name), *(_args(0, p) for p in _pieces(arguments, 3))]
    body = _stream(*events).replace(
        b'"finish_reason":"tool_calls"', f'"finish_reason":"{finish}"'.encode()
    )
    got = _check(_parse(body))
    assert got is not None and got.startswith(why), got
    assert len(got) <= 240


def test_a_named_tool_choice_wants_that_function_and_no_other() -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    contract = AnswerContract.tool_call(TOOLS, choice)
    declared_other = _parse(_stream(_head(0, "get_time"), _args(0, "{}")))
    assert _check(declared_other, contract) == (
        "tool call 0 names 'get_time', not get_weather (tool_choice names it)"
    )
    assert _check(declared_other) is None  # "required": any declared tool will do
    good = _parse(_stream(_head(0, "get_weather"), _args(0, ARGS)))
    assert _check(good, contract) is None


def test_no_tool_call_at_all_fails_saying_one_was_required() -> None:
    words = _event({"content": "I would rather not."})
    got = _check(_parse(_stream(words)))
    assert got == "no tool call in the answer (tool_choice 'required' requires one)"


@pytest.mark.parametrize(
    ("tool_calls", "why"),
    [
        ({"index": 0}, "unreadable tool call: tool_calls delta is dict, not a list"),
        (["call"], "unreadable tool call: a tool-call delta is not an object: 'call'"),
        ([{"index": "0"}], "unreadable tool call: a tool-call delta's index is '0', not an int"),
        ([{"index": True}], "unreadable tool call: a tool-call delta's index is True"),
        ([{"index": 1e300}], "unreadable tool call: a tool-call delta's index is 1e+300"),
        ([{"index": 0, "function": "get_weather"}],
         "unreadable tool call: tool call 0: function is 'get_weather', not an object"),
        ([{"index": 0, "function": {"name": "get_weather", "arguments": {"city": "X"}}}],
         "unreadable tool call: tool call 0: arguments is dict, not a string"),
        ([{"index": 0, "function": {"name": ["get_weather"]}}],
         "unreadable tool call: tool call 0: function name is list, not a string"),
        ([{"index": 0, "id": 5, "function": {"name": "get_weather"}}],
         "unreadable tool call: tool call 0: id is int, not a string"),
    ],
)  # fmt: skip
def test_a_hostile_delta_is_a_contract_failure_never_a_crash(tool_calls: Any, why: str) -> None:
    # after a good call: the hostile delta must not be hidden by it
    hostile = _event({"tool_calls": tool_calls})
    parser = _parse(_stream(_head(0, "get_weather"), _args(0, ARGS), hostile, _args(0, "")))
    assert parser.done and parser.failure is None  # the stream itself is well formed
    got = _check(parser)
    assert got is not None and got.startswith(why), got


def test_a_huge_index_is_kept_as_any_other() -> None:
    big = 2**63
    parser = _parse(_stream(_head(big, "get_weather"), _args(big, '{"city": 1}')))
    assert _check(parser) == (
        f"tool call {big} get_weather: schema violation at /city: 1 is not of type 'string'"
    )


def test_arguments_past_the_bound_are_too_long_to_check_never_a_silent_pass() -> None:
    # 70 KiB of arguments in 1 KiB fragments, a valid object had it been kept whole
    filler = "x" * 1024
    frags = ['{"city": "', *([filler] * 70), '"}']
    parser = _parse(_stream(_head(0, "get_weather"), *(_args(0, f) for f in frags)))
    assert parser.calls is not None and parser.calls.truncated
    assert _check(parser) == (
        f"tool calls too long to check: past {TOOL_CALLS_MAX_BYTES // 1024} KiB of arguments "
        f"or {MAX_CALLS} calls"
    )
    kept = sum(len(c.arguments) for c in parser.calls.calls())
    assert kept <= TOOL_CALLS_MAX_BYTES
    many = _parse(_stream(*(_head(i, "get_time", f"c{i}") for i in range(MAX_CALLS + 5))))
    assert many.calls is not None and len(many.calls.calls()) == MAX_CALLS
    assert (_check(many) or "").startswith("tool calls too long to check")


def test_a_request_without_a_tool_call_contract_keeps_no_call() -> None:
    parser = SSEParser(True)
    parser.feed(_stream(_head(0, "get_weather"), _args(0, ARGS)))
    assert parser.done and parser.calls is None
    assert parser.text is not None and parser.text.tool_calls  # the flag, as before
    assert AnswerContract.json_object().collector() is None


def test_a_tool_whose_parameters_are_no_schema_is_refused_naming_it(tmp_path: Path) -> None:
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "objekt"}}}
    with pytest.raises(ContractError, match=r"^tool lookup: parameters: not a valid JSON Schema"):
        AnswerContract.tool_call([WEATHER, bad], "required")
    with pytest.raises(ContractError, match="tool_choice names 'nope'"):
        AnswerContract.tool_call(TOOLS, {"type": "function", "function": {"name": "nope"}})
    # and a mix file holding it fails when read, before any request
    mix = tmp_path / "mix.toml"
    mix.write_text(
        '[[class]]\nname = "t"\nweight = 1\ntool_choice = "required"\n'
        'tools = [{type = "function", function = {name = "lookup", '
        'parameters = {type = "objekt"}}}]\n'
    )
    with pytest.raises(ValueError, match=r"class 't': tools = .*tool lookup: parameters: not a"):
        read_mix(mix)


def test_arguments_nested_past_the_parsers_depth_are_a_contract_failure_not_soaktops() -> None:
    # 20 000 nested arrays fit in 40 KB: json.loads raises RecursionError, which the
    # client would report as its own failure ("client: RecursionError") — the server's
    # answer must be what fails, as a contract_error that says why.
    deep = "[" * 20_000 + "]" * 20_000
    parser = _parse(_stream(_head(0, "get_time"), *(_args(0, p) for p in _pieces(deep, 40))))
    assert _check(parser) == (
        "tool call 0 get_time: arguments not strict JSON: arrays or objects nested too "
        "deeply to check"
    )
    content = AnswerContract.json_object()
    text = _parse(_stream(_event({"content": '{"a": ' + "[" * 20_000})))
    assert content.check(text.text, "stop") == (
        "not strict JSON: arrays or objects nested too deeply to check"
    )


def test_a_value_too_deep_for_the_validator_is_a_contract_failure() -> None:
    # a recursive schema walks the value level by level: 900 levels parse, but validating
    # them would exceed Python's recursion limit inside jsonschema
    tree = {
        "type": "function",
        "function": {
            "name": "tree",
            "parameters": {
                "type": "object",
                "properties": {"kids": {"$ref": "#/$defs/node"}},
                "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            },
        },
    }
    deep = '{"kids": ' + "[" * 900 + "]" * 900 + "}"
    parser = _parse(_stream(_head(0, "tree"), _args(0, deep)))
    contract = AnswerContract.tool_call([tree], "required")
    assert _check(parser, contract) == (
        "tool call 0 tree: arrays or objects nested too deeply to check against the schema"
    )
