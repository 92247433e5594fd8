"""A soak against the simulated engine, read back from the run directory."""

from __future__ import annotations

import csv
import json

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e


def test_demo_headless_20s_passes_with_a_complete_record(tmp_path):
    rc, out = run_soaktop(
        "demo", "--headless", "--duration", "20", "--out", str(tmp_path), timeout=200
    )
    assert rc == 0, out
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    load = rec["load"]
    assert rec["status"] == "PASSED"
    assert [r["message"] for r in rec["reasons"]] == [
        f"load: 0 failures in {load['issued']:,} requests"
    ]
    # the seed's gate table: json 24/24 and tools 8/8, before and after the load
    for phase in ("before", "after"):
        gates = rec["gates"][phase]
        assert (gates["json"]["passed"], gates["json"]["total"]) == (24, 24), gates
        assert (gates["tools"]["passed"], gates["tools"]["total"]) == (8, 8), gates
        assert rec["reconciliation"][phase]["matched"] is True, rec["reconciliation"][phase]
    for phase in ("before", "load", "after"):
        for counter in ("requests", "prompt_tokens", "generation_tokens"):
            item = rec["reconciliation"][phase][counter]
            assert item["status"] == "matched" and item["client"] == item["server"] > 0, item
    assert "gates: before json 24/24, tools 8/8; after json 24/24, tools 8/8" in out
    assert not (run_dir / "evidence").exists()
    assert load["workers_started"] == load["requested_concurrency"] == 32
    assert load["barrier_released"] is True
    ok_lines = [r for r in journal(run_dir) if r["ok"]]
    assert load["completed"] > 0 and load["completed"] == len(ok_lines)
    assert load["output_tokens"] == sum(r["output_tokens"] for r in ok_lines)
    assert 20.0 <= load["issue_s"] < 21.0 and load["elapsed_s"] >= load["issue_s"]
    for key in ("ttft_s", "e2e_s", "itl_s", "tpot_s"):
        assert load[key]["n"] > 0 and load[key]["method"] == "nearest-rank"
        assert load[key]["p50"] <= load[key]["p99"] <= load[key]["max"]
    assert rec["identity"]["engine"] == "vllm"
    # the server's counters grew by exactly what the client received
    assert rec["reconciliation"]["matched"] is True, rec["reconciliation"]
    engines = rec["telemetry"]["engines"]
    assert len(engines) == 2 and all(e["running_max"] > 0 for e in engines)
    assert sum(e["running_max"] for e in engines) <= load["requested_concurrency"]
    for e in engines:  # every replica: occupancy, slots, client beside server TTFT
        assert 0 < e["running_mean"] <= e["running_max"] and e["token_slots"] > 0, e
        assert e["client_ttft_s"]["n"] > 0 and e["server_ttft_s"]["n"] > 0, e
        gap = e["ttft_gap_s"]["p50"]
        assert gap == e["client_ttft_s"]["p50"] - e["server_ttft_s"]["p50"], e
    gpus = rec["telemetry"]["gpus"]
    assert len(gpus) == 8 and all(g["samples"] > 0 and g["max_temp_c"] for g in gpus), gpus
    assert rec["faults"] == [] and rec["telemetry"]["host"]["client_cpu_percent_max"] > 0
    assert rec["identity"]["endpoints"][0]["token_slots"] > 0
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert rows[0]["status"] == "PASSED" and int(rows[0]["completed_requests"]) == load["completed"]
    assert "PASSED" in out and "[load" in out
    assert (run_dir / "server_logs").is_dir()
    rc, out = run_soaktop("verify", str(run_dir))
    assert rc == 0, out


def test_prompt_file_pool_is_hashed_and_sent(sim, tmp_path):
    prompts = tmp_path / "sharegpt.json"
    prompts.write_text(
        json.dumps(
            [{"conversations": [{"from": "human", "value": f"question {i}"}]} for i in range(5)]
        )
    )
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *run_args(
            sim,
            out,
            "--concurrency",
            "4",
            "--max-requests",
            "20",
            "--max-tokens",
            "8",
            "--prompts",
            str(prompts),
        )
    )
    assert rc == 0, text
    rec = record(only_run_dir(out))
    assert rec["identity"]["prompt_pool"]["size"] == 5
    assert len(rec["identity"]["prompt_pool"]["sha256"]) == 64
    assert rec["load"]["completed"] == 20 and rec["load"]["stop_reason"] == "request count reached"
    # every prompt's id appears: the pool is cycled
    assert {r["prompt"] for r in journal(only_run_dir(out))} == set(range(5))


def test_unreachable_endpoint_fails_before_load(tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        "run",
        "--endpoint",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--out",
        str(out),
        "--headless",
        "--duration",
        "5",
    )
    assert rc == 1, text
    rec = record(only_run_dir(out))
    assert rec["status"] == "FAILED" and rec["load"] is None
    assert "unreachable" in rec["reasons"][0]["message"]


def test_model_not_served_fails_and_names_what_is(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        "run",
        "--endpoint",
        sim.urls[0],
        "--model",
        "no-such-model",
        "--out",
        str(out),
        "--headless",
        "--duration",
        "5",
    )
    assert rc == 1, text
    msg = record(only_run_dir(out))["reasons"][0]["message"]
    assert "'no-such-model' is not served" in msg and sim.model in msg


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--concurrency", "-4"], "concurrency = -4"),
        (["--prompts", "/nonexistent/p.json"], "does not exist"),
        (["--duration", "0"], "duration_s = 0.0"),
    ],
)
def test_bad_configuration_exits_2_without_a_run_directory(sim, tmp_path, args, expected):
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, *args))
    assert rc == 2 and expected in text, text
    assert not out.exists() or not any(out.iterdir())


def test_bad_toml_and_unknown_key_exit_2(sim, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\nconcurency = 4\n")
    rc, text = run_soaktop(*run_args(sim, tmp_path / "r", "--config", str(bad)))
    assert rc == 2 and "unknown key 'concurency'" in text
    bad.write_text("[run\n")
    rc, text = run_soaktop(*run_args(sim, tmp_path / "r", "--config", str(bad)))
    assert rc == 2 and "not valid TOML" in text


def test_soaktop_sim_passes_its_arguments_to_the_simulated_engine():
    rc, text = run_soaktop("sim", "--help")
    assert rc == 0 and "--max-num-seqs" in text and "--scenario" in text


def test_api_key_never_reaches_disk_and_redact_drops_endpoints(sim, tmp_path):
    import os
    import subprocess
    import sys

    secret = "sk-test-5e3c7a1f9b2d"
    out = tmp_path / "runs"
    args = run_args(
        sim,
        out,
        "--concurrency",
        "2",
        "--max-requests",
        "6",
        "--max-tokens",
        "4",
        "--api-key-env",
        "SOAKTOP_TEST_KEY",
        "--redact",
    )
    p = subprocess.run(
        [sys.executable, "-m", "soak", *args],
        capture_output=True,
        text=True,
        env=os.environ | {"SOAKTOP_TEST_KEY": secret},
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = only_run_dir(out)
    ports = [url.rsplit(":", 1)[1] for url in sim.urls]
    for f in run_dir.rglob("*"):
        if f.is_file():
            data = f.read_text(errors="replace")
            assert secret not in data, f
            assert not any(f"127.0.0.1:{port}" in data for port in ports), f
    assert secret not in p.stdout + p.stderr
