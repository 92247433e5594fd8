"""Contract gates, canaries and thresholds through the real CLI, runner and simulated engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e


def _counts(rec: dict[str, Any], phase: str) -> dict[str, tuple[int, int]]:
    return {s: (g["passed"], g["total"]) for s, g in rec["gates"][phase].items()}


def test_post_load_500_fails_the_run_on_one_after_load_json_probe(tmp_path):
    """The seed-000 lesson: a clean load, then one HTTP 500 on one after-load JSON probe."""
    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "20", "--scenario", "post-load-500"),
        *("--out", str(tmp_path)),
        timeout=240,
    )
    assert rc == 1, out
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    assert rec["status"] == "FAILED"
    assert rec["load"]["failed"] == 0 and rec["load"]["completed"] > 0
    assert _counts(rec, "before") == {"json": (24, 24), "tools": (8, 8)}
    assert _counts(rec, "after") == {"json": (23, 24), "tools": (8, 8)}
    (failure,) = rec["gates"]["after"]["json"]["failures"]
    assert failure["outcome"] == "availability" and failure["status"] == 500
    assert failure["label"].startswith("json#")
    # the reason names the phase, the count, the probe, the status and the class
    gate = next(r for r in rec["reasons"] if r["code"] == "gate_failed")
    assert gate["effect"] == "failed"
    assert gate["message"].startswith("after-load json 23/24: json#")
    assert "HTTP 500" in gate["message"] and "(availability)" in gate["message"]
    assert f"load: 0 failures in {rec['load']['issued']:,} requests" in out
    # the evidence: the full request, the 500 response and the server log around it
    evidence = orjson.loads((run_dir / failure["evidence"]).read_bytes())
    (exchange,) = evidence["exchanges"]
    assert exchange["request"]["body"]["response_format"]["type"] == "json_schema"
    assert exchange["response"]["status"] == 500
    (log,) = evidence["server_logs"]
    assert any(failure["request_id"] in line for line in log["matching_request_id"])
    assert failure["evidence"] in rec["files"]
    # the load window and both gate windows still reconcile with the server's counters
    assert rec["reconciliation"]["load"]["matched"] is True
    assert rec["reconciliation"]["before"]["matched"] is True
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_broken_structured_output_is_contract_and_stops_the_run_before_load(tmp_path):
    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "5", "--scenario", "broken-contracts"),
        *("--probe-concurrency", "8", "--out", str(tmp_path)),
        timeout=180,
    )
    assert rc == 1, out
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    assert rec["status"] == "FAILED"
    assert _counts(rec, "before") == {"json": (22, 24), "tools": (7, 8)}
    failures = {f["label"]: f for s in rec["gates"]["before"].values() for f in s["failures"]}
    assert {f["outcome"] for f in failures.values()} == {"contract"}
    assert "control character" in failures["json#3 (" + _task(rec, "json", 3)]["reason"]
    assert "not strict JSON" in failures["json#11 (" + _task(rec, "json", 11)]["reason"]
    assert "arguments of" in failures["tools#2 (" + _task(rec, "tools", 2)]["reason"]
    # nothing to soak: no load, no after gates, and the verdict says why
    assert rec["load"] is None and "after" not in rec["gates"]
    codes = [r["code"] for r in rec["reasons"]]
    assert "before_gates_failed" in codes and "gates_not_run" not in codes
    assert not journal(run_dir)
    assert len(list((run_dir / "evidence").glob("before-*.json"))) == 3


def _task(rec: dict[str, Any], suite: str, index: int) -> str:
    """``invoice)`` — the task id part of a label, from the record's own failures."""
    for f in rec["gates"]["before"][suite]["failures"]:
        if f["label"].startswith(f"{suite}#{index} ("):
            task: str = f["label"].split("(", 1)[1]
            return task
    raise AssertionError(f"{suite}#{index} did not fail")


def test_force_load_soaks_despite_failed_before_gates_and_says_so(tmp_path):
    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "4", "--scenario", "broken-contracts"),
        *("--force-load", "--concurrency", "8", "--probe-concurrency", "8"),
        *("--out", str(tmp_path)),
        timeout=180,
    )
    assert rc == 1, out
    rec = record(only_run_dir(tmp_path))
    assert rec["load"]["completed"] > 0 and rec["load"]["failed"] == 0
    assert _counts(rec, "after") == {"json": (22, 24), "tools": (7, 8)}
    codes = [r["code"] for r in rec["reasons"]]
    assert "force_load" in codes and "before_gates_failed" not in codes
    assert codes.count("gate_failed") == 4  # json and tools, before and after


def test_canaries_run_beside_the_load_and_reconcile(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *run_args(sim, out, "--gates", "json,tools", "--duration", "9", "--concurrency", "8"),
        *("--canary-interval", "3", "--canary-tasks", "2", "--probe-concurrency", "8"),
        timeout=180,
    )
    assert rc == 0, text
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    canary = rec["gates"]["canary"]
    assert canary["json"]["rounds"] >= 2 and canary["json"]["total"] == 2 * canary["json"]["rounds"]
    assert canary["tools"]["passed"] == canary["tools"]["total"] >= 4
    lines = [p for p in journal(run_dir, "probes.jsonl") if p["phase"] == "canary"]
    # rounds rotate through the suite; every canary request id carries its round
    round1 = sorted(p["index"] for p in lines if p["round"] == 1 and p["suite"] == "json")
    round2 = sorted(p["index"] for p in lines if p["round"] == 2 and p["suite"] == "json")
    assert round1 == [1, 2] and round2 == [3, 4]
    assert all(p["request_id"].endswith(f".{p['round']}") for p in lines)
    # canary requests ran inside the load window: the client side counts them too
    load = rec["reconciliation"]["load"]
    assert load["matched"] is True, load
    assert load["includes_canary_requests"] == len(lines)
    assert load["requests"]["client"] == rec["load"]["completed"] + len(lines)
    # snapshots showed canary progress while the load ran
    snaps = journal(run_dir, "snapshots.jsonl")
    assert any("canary" in s["gates"] and s["phase"] == "load" for s in snaps)


def test_threshold_abort_stops_the_load_early_and_fails_the_run(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *run_args(sim, out, "--duration", "60", "--concurrency", "4", "--max-tokens", "32"),
        *("--threshold", "e2e.p99<1ms,abort,grace=2s", "--threshold", "error_rate==0"),
        timeout=120,
    )
    assert rc == 1, text
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rec["status"] == "FAILED"
    assert rec["load"]["issue_s"] < 20, "the abort threshold should have stopped issuing"
    assert "threshold" in rec["load"]["stop_reason"]
    states = {t["condition"]: t for t in rec["thresholds"]}
    assert states["e2e.p99<1ms"]["state"] == "breached"
    assert states["e2e.p99<1ms"]["first_breach_s"] is not None
    assert states["error_rate==0"]["state"] == "ok"
    (abort,) = [r for r in rec["reasons"] if r["code"] == "threshold_abort"]
    assert abort["effect"] == "failed" and "stopped early" in abort["message"]
    assert "aborted" not in [r["code"] for r in rec["reasons"]]  # not an operator abort
    live = [s["thresholds"] for s in journal(run_dir, "snapshots.jsonl") if s["phase"] == "load"]
    assert any(t["state"] == "breached" for ts in live for t in ts)


def test_a_threshold_without_data_is_never_ok(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        # one output token per request: no gaps between tokens, so no ITL to judge
        *run_args(sim, out, "--max-requests", "10", "--concurrency", "2", "--max-tokens", "1"),
        *("--threshold", "itl.p99<1s"),
    )
    assert rc == 3, text
    rec = record(only_run_dir(out))
    assert rec["status"] == "INVALID"
    (t,) = rec["thresholds"]
    assert t["state"] == "no_data" and t["observed"] is None
    assert [r["code"] for r in rec["reasons"] if r["effect"] == "invalid"] == ["threshold_no_data"]


def test_bad_gate_configuration_is_refused_before_anything_runs(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, "--gates", "json,jsno"))
    assert rc == 2 and "'jsno' is not built in" in text, text
    bad = tmp_path / "mine.json"
    bad.write_text('{"suite": "mine", "kind": "json", "tasks": [{"id": "a", "prompt": "x"}]}')
    rc, text = run_soaktop(*run_args(sim, out, "--suite", str(bad)))
    assert rc == 2 and "mine.json" in text and "needs a schema" in text, text
    rc, text = run_soaktop(*run_args(sim, out, "--threshold", "ttft.p98<2s"))
    assert rc == 2 and "unknown statistic 'p98'" in text, text
    # a threshold that cannot be checked is refused up front, not after a 2-hour soak
    rc, text = run_soaktop(*run_args(sim, out, "--no-nvml", "--threshold", "gpu.min_free_mib>2048"))
    assert rc == 2 and "need a GPU telemetry source" in text and "--dcgm URL" in text, text
    rc, text = run_soaktop(*run_args(sim, out, "--threshold", "ttfb.p99<1s,abort"))
    assert rc == 2 and "ttfb.p99" in text, text
    assert not out.exists()


def test_verify_catches_an_edited_verdict_gate_or_threshold(tmp_path):
    import shutil

    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "3", "--scenario", "broken-contracts"),
        *("--probe-concurrency", "8", "--threshold", "ttft.p99<10s", "--out", str(tmp_path)),
        timeout=180,
    )
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    # no load ran: the threshold had nothing to judge, and that does not hide the FAILED
    assert rc == 1 and rec["status"] == "FAILED", out
    assert "threshold_not_evaluated" in [r["code"] for r in rec["reasons"]]
    assert run_soaktop("verify", str(run_dir))[0] == 0

    def tampered(edit: Callable[[dict[str, Any]], None]) -> str:
        copy = tmp_path / f"copy-{edit.__name__}"
        shutil.copytree(run_dir, copy)
        data = record(copy)
        edit(data)
        (copy / "record.json").write_bytes(orjson.dumps(data))
        rc, text = run_soaktop("verify", str(copy))
        assert rc == 1, text
        return text

    def passed(d):  # a failed run made to look clean
        d["status"], d["exit_code"] = "PASSED", 0
        d["reasons"] = []

    def gate(d):
        d["gates"]["before"]["json"]["passed"] = 24
        d["gates"]["before"]["json"]["failures"] = []

    def threshold(d):
        d["thresholds"][0]["state"] = "ok"

    assert "before_gates_failed" in tampered(passed)
    assert "gates.before.json.passed" in tampered(gate)
    assert "thresholds" in tampered(threshold)


def test_an_abort_during_the_before_gates_counts_the_tasks_that_never_ran(tmp_path):
    import signal
    import time

    from soak.cli.demo import simulated_engine
    from tests.e2e.conftest import soaktop, wait_for_phase

    stall = '{"match": "*/before/json/*", "action": "stall", "stall_s": 60, "count": 0}'
    with simulated_engine(replicas=1, extra_args=["--fault", stall]) as sim:
        out = tmp_path / "runs"
        p = soaktop(*run_args(sim, out, "--gates", "json", "--duration", "5"))
        run_dir = wait_for_phase(out, "before_gates")
        time.sleep(1.0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)  # the second one aborts: in-flight probes are cut
        text, _ = p.communicate(timeout=60)
        took = time.monotonic() - t0
    assert p.returncode == 4, text
    assert took < 30, f"the abort took {took:.0f} s"
    rec = record(run_dir)
    gate = rec["gates"]["before"]["json"]
    assert gate["total"] == 24 and gate["not_run"] > 0 and gate["passed"] == 0, gate
    assert "gate_cut_short" in [r["code"] for r in rec["reasons"]]
    assert rec["load"] is None
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_an_api_key_printed_in_the_server_log_never_reaches_the_run_directory(sim, tmp_path):
    import os

    secret = "sk-live-7f3a9c2e55d1"
    log = tmp_path / "server.log"
    log.write_text(f"INFO non-default args: {{'api_key': ['{secret}'], 'host': '0.0.0.0'}}\n")
    needle = tmp_path / "needle.json"
    needle.write_text(
        '{"suite": "needle", "kind": "needle", "defaults": {"max_tokens": 8},'
        ' "tasks": [{"id": "code", "needle": "48213", "context_tokens": 200}]}'
    )
    out = tmp_path / "runs"
    env_key = "SOAKTOP_TEST_SECRET_KEY"
    os.environ[env_key] = secret
    try:
        rc, text = run_soaktop(
            *run_args(sim, out, "--suite", str(needle), "--gates", "needle", "--force-load"),
            *("--api-key-env", env_key, "--server-log", str(log), "--max-requests", "4"),
        )
    finally:
        del os.environ[env_key]
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rc == 1 and rec["gates"]["before"]["needle"]["failures"], text  # evidence written
    evidence = next((run_dir / "evidence").glob("*.json")).read_text()
    assert "<secret>" in evidence and "api_key" in evidence
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_without_an_nvidia_driver_nvml_says_unavailable_once_and_gpu_thresholds_have_no_data(
    sim, tmp_path
):
    """This machine has no GPU: the NVML source must say so once and invent nothing."""
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *run_args(sim, out, "--max-requests", "6", "--concurrency", "2", "--max-tokens", "4"),
        *("--threshold", "gpu.min_free_mib>1"),
    )
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    nvml = [e for e in journal(run_dir, "events.jsonl") if "NVML" in e["message"]]
    assert len(nvml) == 1 and "unavailable" in nvml[0]["message"], nvml
    (src,) = rec["telemetry"]["gpu_sources"]
    assert src["source"] == "nvml" and src["status"] == "unavailable" and src["gpus"] == 0
    assert rec["telemetry"]["gpus"] == [] and rec["identity"]["gpus"] == []
    # no GPU figures were invented: the threshold had no data, so the run cannot pass
    assert rc == 3 and rec["status"] == "INVALID", text
    assert rec["thresholds"][0]["state"] == "no_data"
