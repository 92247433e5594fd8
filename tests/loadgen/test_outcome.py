"""The end-of-stream judgements (loadgen.outcome) and how the summary and verdict use them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.outcome import USAGE_CHUNK_SLACK, is_empty_stream, usage_disagrees, usage_problem
from soak.judge.facts import RunFacts
from soak.judge.verdict import decide
from soak.record.summary import LoadTiming, summarize_load

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=8,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    json_values
    | st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": json_values,
            "completion_tokens": json_values,
            "total_tokens": json_values,
        },
    ),
    st.none() | st.integers(1, 10**6),
)
def test_usage_problem_is_words_or_none_never_an_exception(
    usage: object, limit: int | None
) -> None:
    problem = usage_problem(usage, limit)
    assert problem is None or (isinstance(problem, str) and problem.startswith("usage"))
    assert problem is None or len(problem) < 200


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_possible_usage_is_never_flagged(pt: int, ct: int) -> None:
    usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
    assert usage_problem(usage, ct) is None
    assert usage_problem(usage, None) is None
    assert usage_problem(usage, ct - 1) is not None if ct else True


def test_absent_and_null_counts_are_missing_not_impossible() -> None:
    assert usage_problem(None, 16) is None
    assert usage_problem({}, 16) is None
    assert usage_problem({"prompt_tokens": 5, "completion_tokens": None}, 16) is None


def test_empty_stream_rule() -> None:
    assert is_empty_stream(0, None, None)
    assert is_empty_stream(0, "stop", 0)
    assert is_empty_stream(0, "stop", None)
    assert is_empty_stream(0, None, 5)
    assert not is_empty_stream(0, "stop", 1)  # ended at once: an empty answer, a success
    # No chunk carried a token, yet usage claims more than one: those tokens never arrived.
    assert is_empty_stream(0, "stop", 2)
    assert is_empty_stream(0, "length", 16)  # completion_tokens == max_tokens, no chunk
    assert not is_empty_stream(1, None, None)


def test_disagreement_rule_allows_coalescing_and_a_little_slack() -> None:
    assert not usage_disagrees(1, 256)  # coalesced / speculative decoding: fewer chunks
    assert not usage_disagrees(3 + USAGE_CHUNK_SLACK, 3)
    assert usage_disagrees(4 + USAGE_CHUNK_SLACK, 3)
    assert usage_disagrees(100, 3)
    assert not usage_disagrees(100, None)  # no usage: nothing to disagree with
    assert not usage_disagrees("100", 3)


def line(i: int, **kw: Any) -> dict[str, Any]:
    base = {
        "id": f"r/load/chat/{i}",
        "phase": "load",
        "ok": True,
        "sent_s": 1.0,
        "end_s": 1.5,
        "ttft_s": 0.1,
        "e2e_s": 0.5,
        "prompt_tokens": 5,
        "output_tokens": 4,
        "chunks": 4,
        "cancelled": False,
        "stale_retry": False,
        "failure": None,
        "itl_us": [1000, 1000, 1000],
    }
    return base | kw


def test_summary_counts_and_verdict_words(tmp_path: Path) -> None:
    lines = [
        line(0),
        line(1, chunks=100, output_tokens=3),  # usage disagrees
        line(2, chunks=0, output_tokens=1, itl_us=[]),  # an empty answer
        line(3, stale_retry=True),
        line(4, ok=False, failure="empty_stream", chunks=0, output_tokens=None),
        line(5, ok=False, failure="impossible_usage", output_tokens=None, prompt_tokens=None),
    ]
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    timing = LoadTiming(
        requested_concurrency=1,
        workers_started=1,
        barrier_released=True,
        issue_start_s=0.0,
        issue_end_s=2.0,
        drain_end_s=2.0,
        issued=6,
    )
    load = summarize_load(path, timing)
    assert (load.completed, load.failed) == (4, 2)
    assert load.output_tokens == 4 + 3 + 1 + 4
    assert load.usage_disagrees == 1
    assert (
        load.usage_disagrees_example == "r/load/chat/1: 100 token chunks, usage.completion_tokens 3"
    )
    assert load.empty_answers == 1 and load.stale_connection_retries == 1
    _, reasons = decide(RunFacts(load=load))
    by = {r.code: r for r in reasons}
    msg = by["load_failures"].message
    assert "1 empty_stream (HTTP 200 streams that ended with [DONE] but carried no output)" in msg
    assert "1 impossible_usage (usage numbers that cannot be true" in msg
    assert {
        by[c].effect for c in ("usage_disagrees", "empty_answers", "stale_connection_retries")
    } == {"note"}
    assert "r/load/chat/1" in by["usage_disagrees"].message
