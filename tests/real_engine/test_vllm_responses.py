"""The Responses API against a real vLLM 0.32 (issue 18 §4): ``--api responses`` streams
``/v1/responses``, every request completes, and the tokens the journal counts are the
ones vLLM's own usage reported, ended at the limit as ``length``."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import assert_healthy_soak_verdict, soak_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

MAX_TOKENS = 16
REQUESTS = 8


def test_responses_api_against_vllm(vllm_logged, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(
            vllm_logged, out, "--api", "responses", "--concurrency", "2",
            "--max-requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS),
            "--synthetic-input-tokens", "32", "--duration", "120",
        ),
        timeout=300,
    )  # fmt: skip
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    try:
        assert_healthy_soak_verdict(rc, rec, lines)
    except AssertionError as e:
        raise AssertionError(f"{e}\nexit {rc}: {rec['reasons']}\n{text[-3000:]}") from None
    load = [r for r in lines if r["phase"] == "load"]
    assert len(load) == REQUESTS and all(r["ok"] for r in load)
    assert all("/load/responses/" in r["id"] for r in load)
    for r in load:
        # vLLM's usage (never estimated): at most the limit; a detokenizer may merge
        # tokens into one delta, never split one token into two.
        assert 0 < r["output_tokens"] <= MAX_TOKENS
        assert 0 < r["chunks"] <= r["output_tokens"]
        assert r["finish"] in ("stop", "length")
        assert r["finish"] != "length" or r["output_tokens"] == MAX_TOKENS
    assert rec["load"]["output_tokens"] == sum(r["output_tokens"] for r in load)
