"""SSE parser: framing under any split, token classification, errors never missed."""

from __future__ import annotations

import time

import pytest

from loadgen.envelope import FailureClass
from loadgen.sse import DETAIL_MAX, MAX_EVENT_BYTES, SSEParser, error_message

# Captured from a real vLLM 0.32 (CPU build) /v1/chat/completions stream, include_usage.
VLLM_CHAT = (
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,'
    b'"prompt_text":null}\n\n'
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[{"index":0,"delta":{"content":"finder"},'
    b'"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[{"index":0,"delta":{"content":"Be"},'
    b'"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[{"index":0,"delta":{"content":"weakref"},'
    b'"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[{"index":0,"delta":{"content":"={"},'
    b'"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-ab3194c232b44e41","object":"chat.completion.chunk",'
    b'"created":1795998571,"model":"tiny","choices":[],"usage":{"prompt_tokens":31,'
    b'"total_tokens":35,"completion_tokens":4},"system_fingerprint":"vllm-0.32.0-a9ba64c0"}\n\n'
    b"data: [DONE]\n\n"
)

# Captured from the same server, /v1/completions.
VLLM_COMPLETIONS = (
    b'data: {"id":"cmpl-9df352c53c40ea2d","object":"text_completion","created":1795998571,'
    b'"model":"tiny","choices":[{"index":0,"text":"\'ve","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    b'data: {"id":"cmpl-9df352c53c40ea2d","object":"text_completion","created":1795998571,'
    b'"model":"tiny","choices":[{"index":0,"text":"sn","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    b'data: {"id":"cmpl-9df352c53c40ea2d","object":"text_completion","created":1795998571,'
    b'"model":"tiny","choices":[{"index":0,"text":"count","logprobs":null,'
    b'"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    b'data: {"id":"cmpl-9df352c53c40ea2d","object":"text_completion","created":1795998571,'
    b'"model":"tiny","choices":[],"usage":{"prompt_tokens":1,"total_tokens":4,'
    b'"completion_tokens":3},"system_fingerprint":"vllm-0.32.0-a9ba64c0"}\n\n'
    b"data: [DONE]\n\n"
)

# Captured from the same server: tool_choice "required", hermes parser.
VLLM_TOOLS = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
    b'[{"index":0,"delta":{"content":null,"tool_calls":[{"id":"chatcmpl-tool-973e",'
    b'"type":"function","index":0,"function":{"name":"get_weather"}}]},"logprobs":null,'
    b'"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
    b'[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,"function":'
    b'{"arguments":"{"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
    b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,'
    b'"token_ids":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"tiny",'
    b'"choices":[],"usage":{"prompt_tokens":291,"total_tokens":321,"completion_tokens":30}}\n\n'
    b"data: [DONE]\n\n"
)


def chunk(delta: str, finish: str = "null") -> bytes:
    return (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":' + delta.encode() + b',"logprobs":null,'
        b'"finish_reason":' + finish.encode() + b"}]}\n\n"
    )


ROLE = chunk('{"role":"assistant","content":""}')
USAGE = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def run(parts: list[bytes]) -> tuple[SSEParser, list[int]]:
    """Feed each part; return the parser and the per-read token counts."""
    p = SSEParser()
    counts = [p.feed(part) for part in parts]
    counts.append(p.close())
    return p, counts


def summary(p: SSEParser, counts: list[int]) -> tuple[object, ...]:
    return (
        sum(counts),
        p.done,
        p.failure,
        p.failure_detail,
        p.finish_reason,
        p.prompt_tokens,
        p.completion_tokens,
        p.content_seen,
        p.events,
    )


@pytest.mark.parametrize("stream", [VLLM_CHAT, VLLM_COMPLETIONS, VLLM_TOOLS])
def test_whole_stream(stream: bytes) -> None:
    p, counts = run([stream])
    assert p.done and p.failure is None
    assert p.content_seen
    assert p.prompt_tokens is not None and p.completion_tokens is not None
    expected = {VLLM_CHAT: 4, VLLM_COMPLETIONS: 3, VLLM_TOOLS: 2}[stream]
    assert sum(counts) == expected


def test_vllm_chat_facts() -> None:
    p, counts = run([VLLM_CHAT])
    assert summary(p, counts) == (4, True, None, None, "length", 31, 4, True, 7)


def test_tool_calls_finish_reason() -> None:
    p, _ = run([VLLM_TOOLS])
    assert p.finish_reason == "tool_calls"
    assert (p.prompt_tokens, p.completion_tokens) == (291, 30)


@pytest.mark.parametrize("stream", [VLLM_CHAT, VLLM_COMPLETIONS, VLLM_TOOLS])
def test_every_split_point_gives_identical_results(stream: bytes) -> None:
    whole = summary(*run([stream]))
    for i in range(len(stream) + 1):
        assert summary(*run([stream[:i], stream[i:]])) == whole, i


def test_every_two_split_points_and_byte_by_byte() -> None:
    whole = summary(*run([VLLM_CHAT]))
    assert summary(*run([bytes([b]) for b in VLLM_CHAT])) == whole
    n = len(VLLM_CHAT)
    for i in range(0, n, 7):
        for j in range(i, n, 13):
            parts = [VLLM_CHAT[:i], VLLM_CHAT[i:j], VLLM_CHAT[j:]]
            assert summary(*run(parts)) == whole, (i, j)


def test_one_event_per_read_counts_per_read() -> None:
    events = [e + b"\n\n" for e in VLLM_CHAT.split(b"\n\n") if e]
    _, counts = run(events)
    assert counts == [0, 1, 1, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("nl", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_endings(nl: bytes) -> None:
    stream = VLLM_CHAT.replace(b"\n", nl)
    whole = summary(*run([VLLM_CHAT]))
    assert summary(*run([stream])) == whole
    for i in range(len(stream) + 1):  # including a "\r" | "\n" split
        assert summary(*run([stream[:i], stream[i:]])) == whole, i


def test_comments_multiline_data_and_other_fields() -> None:
    stream = (
        b": keep-alive\n\n"
        + b"id: 1\nevent: message\nretry: 10\n"
        + b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"hi"}}]}\n\n'
        + b": ping\n"
        + chunk('{"content":"x"}')
        + DONE
    )
    p, counts = run([stream])
    assert (sum(counts), p.done, p.failure) == (2, True, None)


def test_data_without_space_and_several_events_per_read() -> None:
    stream = (chunk('{"content":"a"}') * 3).replace(b"data: ", b"data:") + DONE
    p, counts = run([stream])
    assert counts[0] == 3 and p.done


def test_role_chunk_is_not_a_token() -> None:
    p, counts = run([ROLE])
    assert sum(counts) == 0 and not p.content_seen and not p.done
    p, counts = run([chunk('{"role":"assistant"}'), chunk('{"content":null}')])
    assert sum(counts) == 0


@pytest.mark.parametrize("key", ["reasoning", "reasoning_content"])
def test_reasoning_is_a_token_but_not_content(key: str) -> None:
    p = SSEParser()
    assert p.feed(ROLE) == 0
    assert p.feed(chunk(f'{{"{key}":"Let me think"}}')) == 1
    assert not p.content_seen
    assert p.feed(chunk(f'{{"{key}":" more"}}')) == 1  # the template path
    assert not p.content_seen
    assert p.feed(chunk('{"content":"Answer"}')) == 1
    assert p.content_seen
    assert p.feed(chunk(f'{{"{key}":" x"}}') + chunk('{"content":"y"}')) == 2


def test_reasoning_with_null_content_key() -> None:
    p = SSEParser()
    assert p.feed(chunk('{"content":null,"reasoning":"r"}')) == 1
    assert not p.content_seen


def test_tool_call_delta_is_visible_token() -> None:
    p = SSEParser()
    delta = '{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city"}}]}'
    assert p.feed(chunk(delta)) == 1
    assert p.content_seen
    assert p.feed(chunk('{"tool_calls":[]}')) == 0


def test_content_with_quotes_and_escapes() -> None:
    p = SSEParser()
    assert p.feed(chunk('{"content":"a"}')) == 1  # learns the template
    assert p.feed(chunk('{"content":"say \\"hi\\""}')) == 1
    assert p.feed(chunk('{"content":"back\\\\"}')) == 1
    assert p.feed(chunk('{"content":"\\u00e9"}')) == 1
    assert p.feed(chunk('{"content":""}')) == 0
    # quoted "error" inside content costs a decode, is not an error
    assert p.feed(chunk('{"content":"an \\"error\\" here"}')) == 1
    assert p.failure is None


def test_template_does_not_swallow_different_structure() -> None:
    p = SSEParser()
    assert p.feed(chunk('{"content":"a"}')) == 1
    # same prefix, last token carries finish_reason: must be decoded
    assert p.feed(chunk('{"content":"b"}', finish='"stop"')) == 1
    assert p.finish_reason == "stop"
    # same prefix, followed by an error event in the same read
    err = b'data: {"error":{"message":"boom","type":"InternalServerError","code":500}}\n\n'
    assert p.feed(chunk('{"content":"c"}') + err) == 1
    assert p.failure is FailureClass.ERROR_EVENT


def test_text_completion_tokens() -> None:
    p, counts = run([VLLM_COMPLETIONS])
    assert counts[0] == 3 and p.content_seen and p.finish_reason == "length"


def test_spaced_json_from_other_engines() -> None:
    # json.dumps default separators (", ", ": "), as SGLang/TGI/llama.cpp-style servers write
    stream = (
        b'data: {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", '
        b'"content": ""}, "finish_reason": null}]}\n\n'
        b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "Hel"}, '
        b'"finish_reason": null}]}\n\n'
        b'data: {"id": "x", "choices": [{"index": 0, "delta": {"reasoning_content": "r"}, '
        b'"finish_reason": null}]}\n\n'
        b'data: { "id" : "x", "choices" : [ { "index" : 0, "text" : "lo", '
        b'"finish_reason" : "stop" } ] }\n\n'
        b'data: {"id": "x", "choices": [], "usage": {"prompt_tokens": 5, '
        b'"completion_tokens": 3, "total_tokens": 8}}\n\n'
        b"data: [DONE]\n\n"
    )
    p, counts = run([stream])
    assert sum(counts) == 3
    assert p.done and p.content_seen and p.finish_reason == "stop"
    assert (p.prompt_tokens, p.completion_tokens) == (5, 3)


def test_error_event_nested_shape() -> None:
    # vLLM's mid-stream failure: json.dumps (spaced) of ErrorResponse, then [DONE]
    err = (
        b'data: {"error": {"message": "EngineCore encountered an issue", '
        b'"type": "InternalServerError", "param": null, "code": 500}}\n\n'
    )
    p, counts = run([ROLE, chunk('{"content":"a"}'), err, DONE])
    assert sum(counts) == 1
    assert p.failure is FailureClass.ERROR_EVENT
    assert p.failure_detail is not None
    assert "EngineCore encountered an issue" in p.failure_detail
    assert "InternalServerError" in p.failure_detail
    assert not p.done  # parsing stopped at the error


def test_error_event_flat_older_vllm_shape() -> None:
    err = (
        b'data: {"object":"error","message":"Request aborted","type":"BadRequestError",'
        b'"code":400}\n\n'
    )
    p, _ = run([chunk('{"content":"a"}'), err, DONE])
    assert p.failure is FailureClass.ERROR_EVENT
    assert p.failure_detail is not None and "Request aborted" in p.failure_detail


def test_error_event_string_and_sse_event_field() -> None:
    p, _ = run([b'data: {"error":"Input validation error","error_type":"validation"}\n\n'])
    assert p.failure is FailureClass.ERROR_EVENT
    assert p.failure_detail is not None and "Input validation error" in p.failure_detail
    p, _ = run([b"event: error\ndata: overloaded\n\n"])
    assert p.failure is FailureClass.ERROR_EVENT
    assert p.failure_detail is not None and "overloaded" in p.failure_detail


def test_error_split_across_reads_is_never_missed() -> None:
    err = b'data: {"error":{"message":"engine dead","code":500}}\n\n'
    stream = ROLE + chunk('{"content":"a"}') + err + DONE
    for i in range(len(stream) + 1):
        p, _ = run([stream[:i], stream[i:]])
        assert p.failure is FailureClass.ERROR_EVENT, i


def test_null_error_key_is_not_an_error() -> None:
    p, counts = run([chunk('{"content":"a"}').replace(b'"choices"', b'"error":null,"choices"')])
    assert p.failure is None and sum(counts) == 1


@pytest.mark.parametrize(
    "payload",
    [
        b'data: {"id":"x","choices":[{"delta":{"content":"a"}}\n\n',  # truncated
        b'data: {"id":"x","choices":[{"delta":{"content":"a"}}]]}\n\n',
        b"data: not json at all\n\n",
        b"data: [1, 2]\n\n",
    ],
)
def test_malformed_json_is_classified_with_bytes(payload: bytes) -> None:
    p, _ = run([ROLE, payload, DONE])
    assert p.failure is FailureClass.MALFORMED
    assert p.failure_detail is not None
    assert payload[6:-2][:14].decode() in p.failure_detail
    assert not p.done


def test_malformed_detail_is_truncated() -> None:
    p, _ = run([b'data: {"x": "' + b"a" * 5000 + b"\n\n"])
    assert p.failure is FailureClass.MALFORMED
    assert p.failure_detail is not None and len(p.failure_detail) <= 300


def test_done_stops_parsing() -> None:
    p = SSEParser()
    assert p.feed(chunk('{"content":"a"}') + DONE + chunk('{"content":"b"}')) == 1
    assert p.done and p.stopped
    assert p.feed(chunk('{"content":"c"}')) == 0


def test_close_dispatches_last_complete_line_only() -> None:
    p = SSEParser()
    p.feed(chunk('{"content":"a"}') + b"data: [DONE]\n")
    assert not p.done
    p.close()
    assert p.done
    p = SSEParser()
    p.feed(chunk('{"content":"a"}') + b'data: {"id":"x","cho')  # cut mid-event
    p.close()
    assert not p.done and p.failure is None  # the caller calls this a stream cut


def test_missing_usage_leaves_tokens_none() -> None:
    p, _ = run([ROLE, chunk('{"content":"a"}', finish='"stop"'), DONE])
    assert p.done and p.prompt_tokens is None and p.completion_tokens is None


def test_usage_chunk() -> None:
    p, _ = run([USAGE, DONE])
    assert (p.prompt_tokens, p.completion_tokens) == (7, 3)


def test_error_message_shapes() -> None:
    assert error_message({"error": {"message": "m", "type": "T", "code": 404}}) == (
        "m [type=T, code=404]"
    )
    assert error_message({"object": "error", "message": "flat", "code": 400}) == ("flat [code=400]")
    assert error_message({"detail": "Not Found"}) == "Not Found"
    assert error_message({"choices": []}) is None
    assert error_message({"error": None}) is None


# -- an event that never ends (a hostile 200 that keeps bytes coming) ----------------------

READ = 64 * 1024


@pytest.mark.parametrize(
    "unit",
    [
        b"x" * 1024,  # no newline at all
        b"data: " + b"y" * 1017 + b"\n",  # data: lines, never the blank line
        b"data: " + b"z" * 1016 + b"\r\n",  # the same with CRLF line endings
    ],
    ids=["no-newline", "data-lines", "data-lines-crlf"],
)
def test_an_endless_event_is_malformed_past_the_cap(unit: bytes) -> None:
    stream = b"data: " + unit * (2 * 1024 * 1024 // len(unit))  # 2 MiB, never an event end
    p = SSEParser()
    reads = 0
    t0 = time.perf_counter()
    for at in range(0, len(stream), READ):
        p.feed(stream[at : at + READ])
        reads += 1
        if p.stopped:
            break
    elapsed = time.perf_counter() - t0
    assert p.stopped and p.failure is FailureClass.MALFORMED and not p.done
    assert p.failure_detail is not None
    assert "grew past 1 MiB without its end (blank line)" in p.failure_detail, p.failure_detail
    assert len(p.failure_detail) <= DETAIL_MAX
    assert reads <= MAX_EVENT_BYTES // READ + 1  # stopped at the cap, not at the end
    assert p.feed(b"\n\ndata: [DONE]\n\n") == 0 and not p.done  # nothing after a failure
    assert p.close() == 0
    assert elapsed < 1.0  # bounded: the 2 MiB are never all held nor rescanned


def test_a_large_event_below_the_cap_still_parses() -> None:
    big = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"a" * (MAX_EVENT_BYTES - 100)
    big += b'"},"finish_reason":null}]}\n\n'
    assert len(big) <= MAX_EVENT_BYTES
    p = SSEParser()
    tokens = sum(p.feed(big[at : at + READ]) for at in range(0, len(big), READ))
    assert tokens == 1 and p.failure is None and p.content_seen
    p.feed(b"data: [DONE]\n\n")
    assert p.done
