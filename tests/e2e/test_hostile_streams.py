"""A whole run against the hostile server: nothing counts as a success unless it is one.

- empty 200 streams and impossible usage are failures with their own classes, named in
  words in the verdict, shown on the headless line, left out of every token figure;
- usage that disagrees with the streamed chunks is a note, with an example request id;
- a server without keep-alive that does not say so costs no failure: the stale pooled
  connections are resent once and counted;
- ``soaktop verify`` recomputes all of it from ``requests.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.hostile_server import good_stream, hostile_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _chunk(delta: str) -> str:
    return (
        'data: {"id":"c","object":"chat.completion.chunk","created":1,"choices":[{"index":0,'
        f'"delta":{delta},"finish_reason":null}}]}}\n\n'
    )


ROLE = _chunk('{"role":"assistant","content":""}')
TOKEN = _chunk('{"content":"x"}')
DONE = "data: [DONE]\n\n"


def usage(pt: int, ct: int) -> str:
    return (
        'data: {"id":"c","object":"chat.completion.chunk","created":1,"choices":[],'
        f'"usage":{{"prompt_tokens":{pt},"completion_tokens":{ct},"total_tokens":{pt + ct}}}}}\n\n'
    )


def run(url: str, out: Path, *extra: str) -> tuple[int, str]:
    return run_soaktop(
        "run",
        "--model",
        "hostile",
        "--endpoint",
        url,
        "--out",
        str(out),
        "--headless",
        "--interval",
        "1",
        "--no-gates",
        "--no-nvml",
        *extra,
        timeout=90,
    )


def test_empty_streams_and_impossible_usage_fail_and_count_no_token(tmp_path: Path) -> None:
    script = {
        "completion": {
            "sequence": [
                {"stream": [DONE]},  # the 21,884 "completed" requests, 0 tokens
                {"stream": [ROLE, TOKEN, usage(5, -12_202), DONE]},  # the −12,202 tok/s
                {"stream": [ROLE, TOKEN, usage(5, 100_000), DONE]},  # above max_tokens 256
                {"stream": good_stream("hostile")},
            ]
        }
    }
    with hostile_server(script) as url:
        code, out = run(url, tmp_path, "--max-requests", "40", "--concurrency", "4")
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    load = rec["load"]
    assert code == 1 and rec["status"] == "FAILED", out
    by = load["failures_by_class"]
    assert by == {"empty_stream": 10, "impossible_usage": 20}, by
    assert load["completed"] == 10 and load["failed"] == 30
    # Only the good streams' tokens: 2 each, never the negative or the impossible ones.
    assert load["output_tokens"] == 20 and load["prompt_tokens"] == 50
    assert load["output_tokens_per_s"] > 0
    reasons = " ".join(r["message"] for r in rec["reasons"])
    assert "empty_stream (HTTP 200 streams that ended with [DONE] but carried no output)" in reasons
    assert "impossible_usage (usage numbers that cannot be true" in reasons
    assert "empty_stream" in out and "impossible_usage" in out  # the headless lines
    details = {line["detail"] for line in journal(run_dir) if line["failure"] == "impossible_usage"}
    assert details == {
        "usage.completion_tokens is -12202: a token count cannot be negative",
        "usage.completion_tokens is 100000, above the request's max_tokens of 256",
    }
    code, out = run_soaktop("verify", str(run_dir))
    assert code == 0, out


def test_usage_disagreement_is_noted_and_no_keepalive_costs_nothing(tmp_path: Path) -> None:
    # 100 token chunks, "3 tokens"; varied words: 100 "x" would be degenerate repetition
    varied = [_chunk(f'{{"content":" w{i}"}}') for i in range(100)]
    lying = [ROLE, *varied, usage(5, 3), DONE]
    script = {
        "completion": {
            "sequence": [
                {"stream": lying, "close": "silent"},
                {"stream": good_stream("hostile"), "close": "silent"},
            ]
        }
    }
    with hostile_server(script) as url:
        code, out = run(url, tmp_path, "--max-requests", "60", "--concurrency", "3")
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    load = rec["load"]
    assert load["failed"] == 0 and load["completed"] == 60, load["failures_by_class"]
    assert code == 0 and rec["status"] == "PASSED", out
    assert load["usage_disagrees"] == 30
    assert "100 token chunks, usage.completion_tokens 3" in load["usage_disagrees_example"]
    # The server closed every connection without saying so: most second requests met one.
    retries = load["stale_connection_retries"]
    assert retries >= 10, load
    assert sum(1 for line in journal(run_dir) if line["stale_retry"]) == retries
    codes = {r["code"]: r for r in rec["reasons"]}
    assert codes["usage_disagrees"]["effect"] == "note"
    assert "/load/chat/" in codes["usage_disagrees"]["message"]
    assert codes["stale_connection_retries"]["effect"] == "note"
    code, out = run_soaktop("verify", str(run_dir))
    assert code == 0, out
