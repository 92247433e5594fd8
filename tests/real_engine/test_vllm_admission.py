"""vLLM's admission limit under a real soak: rejections that soaktop must count and classify."""

from __future__ import annotations

import collections

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import EXIT, assert_reasons_match_journal, soak_args
from tests.real_engine.vllm_server import vllm_server

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]


def test_admission_rejections(tmp_path):
    out = tmp_path / "runs"
    with vllm_server(tmp_path, ["--max-num-seqs", "4", "--max-num-queued-reqs", "4"]) as srv:
        rc, text = run_soaktop(
            *soak_args(
                srv,
                out,
                "--concurrency",
                "32",
                "--duration",
                "15",
                "--max-tokens",
                "64",
                "--ignore-eos",
            ),
            timeout=300,
        )
        assert srv.alive(), f"vLLM died under admission pressure; see {srv.log_path}"
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    lines = journal(run_dir)
    load = rec["load"]
    print(f"failures_by_class={load['failures_by_class']} completed={load['completed']}")
    assert_reasons_match_journal(rec, lines)
    assert rc == EXIT["FAILED"] and rec["status"] == "FAILED", (rc, rec["reasons"], text[-2000:])
    assert rec["reasons"][0]["code"] == "load_failures", rec["reasons"]
    assert load["workers_started"] == 32 and load["barrier_released"] is True
    assert load["completed"] > 0  # the admitted requests still finish

    # Both shapes of a rejection: an HTTP 503, and an error event inside an HTTP 200 stream
    # (a client that counts status codes alone misses the second).
    by_class = load["failures_by_class"]
    assert by_class.get("http_5xx", 0) > 0 and by_class.get("error_event", 0) > 0, by_class
    assert set(by_class) == {"http_5xx", "error_event"}, by_class
    failed = [r for r in lines if not r["ok"] and not r["cancelled"]]
    statuses = collections.Counter((r["failure"], r["status"]) for r in failed)
    assert set(statuses) == {("http_5xx", 503), ("error_event", 200)}, statuses
    assert all(r["detail"] for r in failed)
    assert all(r["output_tokens"] == 64 for r in lines if r["ok"])
