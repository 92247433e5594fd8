"""Property tests of the SSE parser (issue 12 §6).

(a) Any split of a valid stream into reads yields exactly what feeding it whole yields —
    and both agree with what the stream was built to hold (token events, visible content,
    finish_reason, usage, ``[DONE]``). Streams vary the token texts (any unicode, quotes,
    backslashes, escapes, control characters), the line endings (``\\n``, ``\\r\\n``,
    ``\\r``), ``data:`` with and without its space, comments, ``id:``/``retry:``/``event:``
    fields, multi-line ``data``, spaced (non-compact) JSON, role, finish and usage chunks.
(b) Any bytes, and any bytes spliced into a valid stream, in any split, end in a classified
    outcome — ``[DONE]``, a failure class, or "not done" (the client's ``stream_cut``) —
    and never an exception out of ``feed()``/``close()``.

Derandomized with modest example counts: the same examples on every machine, in seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.envelope import FailureClass
from loadgen.sse import DETAIL_MAX, SSEParser

PROPS = settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Token texts: anything a model may emit, weighted towards what breaks byte-level parsing.
texts = st.text(max_size=12) | st.sampled_from(
    ['"', "\\", '\\"', '"}', "\\n", "\n\n", "data: [DONE]", "}{", "é", "日本", "🙂", "\x1b[2J", " "]
)
TOKEN_KEYS = ("content", "reasoning", "reasoning_content", "text", "tool_calls")


@dataclass
class Built:
    """A generated stream and the facts it was built to carry."""

    raw: bytes
    tokens: int
    content_seen: bool
    finish_reason: str | None
    usage: dict[str, int] | None
    done: bool


def _payload(key: str, value: str) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1}
    if key == "text":  # /v1/completions
        return base | {"choices": [{"index": 0, "text": value, "finish_reason": None}]}
    if key == "tool_calls":
        call = {"index": 0, "function": {"arguments": value}}
        return base | {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    delta = {key: value}
    return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


@st.composite
def valid_streams(draw: st.DrawFn) -> Built:
    nl = draw(st.sampled_from(["\n", "\r\n", "\r"])).encode()
    space = draw(st.sampled_from([b" ", b""]))
    events: list[bytes] = []
    tokens = 0
    content_seen = False

    def event(obj: object, *, spaced: bool = False, multiline: bool = False) -> bytes:
        if multiline:  # JSON across several `data:` lines (joined by "\n": JSON whitespace)
            lines = json.dumps(obj, indent=1, ensure_ascii=False).split("\n")
            return b"".join(b"data:" + space + ln.encode() + nl for ln in lines) + nl
        body = json.dumps(obj, ensure_ascii=False).encode() if spaced else orjson.dumps(obj)
        return b"data:" + space + body + nl + nl

    events.append(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["token", "token", "token", "comment", "fields"]))
        if kind == "comment":
            events.append(b": ping" + nl)
            continue
        if kind == "fields":
            events.append(b"id: 7" + nl + b"retry: 100" + nl + b"event: message" + nl)
        key = draw(st.sampled_from(TOKEN_KEYS))
        value = draw(texts)
        style = draw(st.sampled_from(["compact", "compact", "spaced", "multiline"]))
        events.append(
            event(_payload(key, value), spaced=style == "spaced", multiline=style == "multiline")
        )
        if value or key == "tool_calls":  # an empty string is no token; a tool-call delta is
            tokens += 1
            content_seen = content_seen or key in ("content", "text", "tool_calls")
    finish = draw(st.sampled_from([None, "stop", "length", "tool_calls"]))
    if finish is not None:
        events.append(event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    usage = None
    if draw(st.booleans()):
        pt, ct = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**4))
        usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
        events.append(event({"choices": [], "usage": usage}))
    done = draw(st.booleans())
    if done:
        events.append(b"data:" + space + b"[DONE]" + nl + nl)
    return Built(b"".join(events), tokens, content_seen, finish, usage, done)


def splits(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    parts, prev = [], 0
    for p in points:
        parts.append(raw[prev:p])
        prev = p
    parts.append(raw[prev:])
    return [p for p in parts if p]


def outcome(reads: list[bytes]) -> tuple[object, ...]:
    p = SSEParser()
    tokens = sum(p.feed(r) for r in reads) + p.close()
    return (
        tokens,
        p.content_seen,
        p.finish_reason,
        p.prompt_tokens,
        p.completion_tokens,
        p.usage,
        p.done,
        p.failure,
        p.events,
    )


@st.composite
def split_streams(draw: st.DrawFn) -> tuple[Built, list[int]]:
    """A valid stream and cut points inside it (drawn against its length, so that the
    cuts land anywhere: inside a ``\r\n``, a UTF-8 character, a key, ``[DONE]``)."""
    built = draw(valid_streams())
    return built, draw(st.lists(st.integers(0, len(built.raw)), max_size=12))


@PROPS
@given(split_streams())
def test_any_split_of_a_valid_stream_gives_the_same_facts(case: tuple[Built, list[int]]) -> None:
    built, cuts = case
    whole = outcome([built.raw])
    assert outcome(splits(built.raw, cuts)) == whole
    tokens, content_seen, finish, pt, ct, usage, done, failure, _ = whole
    assert failure is None, built.raw
    assert tokens == built.tokens, built.raw
    assert content_seen == built.content_seen
    assert finish == built.finish_reason
    assert usage == built.usage
    assert (pt, ct) == (
        (usage["prompt_tokens"], usage["completion_tokens"]) if usage else (None, None)
    )
    assert done == built.done


@PROPS
@given(valid_streams())
def test_byte_by_byte_equals_whole(built: Built) -> None:
    reads = [built.raw[i : i + 1] for i in range(len(built.raw))]
    assert outcome(reads) == outcome([built.raw])


def _classified(reads: list[bytes]) -> None:
    p = SSEParser()
    total = 0
    for r in reads:
        n = p.feed(r)  # must not raise
        assert n >= 0
        total += n
    total += p.close()
    assert total >= 0
    if p.failure is not None:
        assert isinstance(p.failure, FailureClass) and p.stopped and not p.done
        assert isinstance(p.failure_detail, str) and len(p.failure_detail) <= DETAIL_MAX
    if p.done:
        assert p.stopped and p.failure is None
    for value in (p.prompt_tokens, p.completion_tokens):
        assert value is None or (isinstance(value, int) and not isinstance(value, bool))


@PROPS
@given(st.binary(max_size=400), st.lists(st.integers(0, 10**6), max_size=8))
def test_garbage_is_classified_never_raised(garbage: bytes, cuts: list[int]) -> None:
    _classified(splits(garbage, cuts))
    _classified([b"data: " + garbage + b"\n\n"])  # garbage where a payload belongs


@PROPS
@given(
    valid_streams(),
    st.binary(min_size=1, max_size=80) | st.sampled_from([b"\x00", b"\r", b"\n\n", b"{", b'"']),
    st.integers(0, 10**6),
    st.lists(st.integers(0, 10**6), max_size=8),
)
def test_garbage_spliced_into_a_valid_stream_is_classified(
    built: Built, garbage: bytes, at: int, cuts: list[int]
) -> None:
    i = at % (len(built.raw) + 1)
    spliced = built.raw[:i] + garbage + built.raw[i:]
    _classified(splits(spliced, cuts))
    # A split of the damaged stream still parses as the whole damaged stream does.
    assert outcome(splits(spliced, cuts)) == outcome([spliced])
