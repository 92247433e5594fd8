"""The Responses API (``--api responses``): the simulated engine's ``/v1/responses`` stream
measured by StreamClient, counted as a chat stream is counted (issue 18 §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.client import StreamClient
from loadgen.envelope import FailureClass, RequestResult
from loadgen.prompts import BodyBuilder
from loadgen.responses_api import ResponsesParser
from simengine import SimConfig, run_sim

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _ev(kind: str, **obj: object) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (kind.encode(), orjson.dumps({"type": kind, **obj}))


COMPLETED = _ev(
    "response.completed",
    response={"status": "completed", "usage": {"input_tokens": 9, "output_tokens": 3,
                                                "total_tokens": 12}},
)  # fmt: skip


TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}  # fmt: skip


async def _stream(
    api: str, n: int = 6, extra: tuple[tuple[str, Any], ...] = (), **sim: Any
) -> list[RequestResult]:
    async with run_sim(SimConfig(decode_ms_base=1, **sim)) as s:
        bodies = BodyBuilder(model=s.cfg.model, api=api, max_tokens=64, extra=extra)  # type: ignore[arg-type]
        url = s.replicas[0].url + bodies.path
        async with StreamClient(max_connections=4) as client:
            return [
                await client.stream(url, bodies.build(f"q{i}"), request_id=f"r{i}", worker=0,
                                    prompt_id=i)
                for i in range(n)
            ]  # fmt: skip


async def test_responses_counted_as_chat_counts_them() -> None:
    """Same engine, same request ids (so the same planned answers): the Responses stream's
    token counts, usage, reasoning and finish match the chat stream's."""
    sim: dict[str, Any] = {
        "reasoning_tokens": 3,
        "tool_call_probability": 0.0,
        "mean_output_tokens": 12,
    }
    chat = await _stream("chat", **sim)
    resp = await _stream("responses", **sim)
    for c, r in zip(chat, resp, strict=True):
        assert r.ok, (r.failure, r.failure_detail)
        assert r.status == 200
        assert (r.chunks, r.output_tokens, r.finish_reason) == (
            c.chunks, c.output_tokens, c.finish_reason,
        )  # fmt: skip
        assert r.prompt_tokens is not None and r.prompt_tokens > 0
        # Reasoning first: TTFT at the first reasoning delta, first content later.
        assert r.first_token_ns is not None and r.first_content_ns is not None
        assert r.first_content_ns > r.first_token_ns
        assert len(r.itl_ns) == r.chunks - 1


async def test_responses_tool_calls_finish_as_tool_calls() -> None:
    results = await _stream("responses", n=4, extra=(("tools", [TOOL]),), tool_call_probability=1.0)
    assert all(r.ok and r.finish_reason == "tool_calls" for r in results)
    assert all(r.chunks == r.output_tokens for r in results)


def test_parser_events_and_failures() -> None:
    p = ResponsesParser(collect=True)
    n = p.feed(_ev("response.created", response={"status": "in_progress"}))
    n += p.feed(_ev("response.reasoning_text.delta", delta="hm"))
    assert n == 1 and not p.content_seen
    n = p.feed(_ev("response.output_text.delta", delta="Hi") + _ev(
        "response.output_text.delta", delta=" there"))  # fmt: skip
    assert n == 2 and p.content_seen and not p.done
    p.feed(COMPLETED)
    assert p.done and p.finish_reason == "stop"
    assert (p.prompt_tokens, p.completion_tokens) == (9, 3)
    assert p.usage == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}

    cut = ResponsesParser()
    cut.feed(b"data: " + orjson.dumps({"type": "response.output_text.delta", "delta": "x"}))
    cut.feed(b"\n\n")
    assert cut.events == 1 and not cut.done  # data-only framing counts too; no end yet

    failed = ResponsesParser()
    failed.feed(_ev("response.failed", response={"error": {"message": "engine died"}}))
    assert failed.failure is FailureClass.ERROR_EVENT and failed.failure_detail == "engine died"

    incomplete = ResponsesParser()
    incomplete.feed(_ev("response.incomplete", response={
        "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 1, "output_tokens": 2}}))  # fmt: skip
    assert incomplete.done and incomplete.finish_reason == "length"

    bad = ResponsesParser()
    bad.feed(b'event: response.output_text.delta\ndata: {"type":\n\n')
    assert bad.failure is FailureClass.MALFORMED


async def test_responses_error_event_mid_stream_is_a_failure() -> None:
    fault = {"match": "r1", "action": "error_event", "after_tokens": 2}
    results = await _stream("responses", n=3, faults=[fault])
    assert results[0].ok and results[2].ok
    assert results[1].failure is FailureClass.ERROR_EVENT


def test_a_real_vllm_stream_is_parsed() -> None:
    """Captured from vLLM 0.32 (CPU, the tiny model): 16 tokens in 12 text deltas, ended
    by response.completed with status incomplete (max_output_tokens 16)."""
    raw = (FIXTURES / "vllm_0.32_responses_stream.txt").read_bytes()
    p = ResponsesParser(collect=True)
    tokens = sum(p.feed(raw[i : i + 97]) for i in range(0, len(raw), 97))  # any split
    tokens += p.close()
    assert p.done and p.failure is None
    assert tokens == 12 and p.content_seen
    assert (p.prompt_tokens, p.completion_tokens, p.finish_reason) == (34, 16, "length")


def test_an_end_event_that_is_no_answer_is_no_success() -> None:
    """vLLM's end event carries the status: failed or cancelled is a failure, and an
    incomplete answer without a reason is "incomplete", never the text "None"."""
    for status in ("failed", "cancelled"):
        p = ResponsesParser()
        p.feed(_ev("response.completed", response={"status": status,
                                                   "error": {"message": "oom"}}))  # fmt: skip
        assert (
            p.failure is FailureClass.ERROR_EVENT and p.failure_detail == f"response {status}: oom"
        )
    bare = ResponsesParser()
    bare.feed(_ev("response.completed", response={"status": "incomplete",
                                                  "incomplete_details": None}))  # fmt: skip
    assert bare.done and bare.failure is None and bare.finish_reason == "incomplete"
    filt = ResponsesParser()
    filt.feed(
        _ev("response.incomplete", response={"incomplete_details": {"reason": "content_filter"}})
    )
    assert filt.finish_reason == "content_filter"
