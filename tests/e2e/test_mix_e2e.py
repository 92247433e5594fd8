"""A mixed workload against the simulated engine (issue 16 §2 and §5): the sample mix's
three classes run in one soak, each with its own figures that sum to the load's; JSON
answers that break their schema are contract failures of the JSON class, never
availability ones; class thresholds pass and fail on the record; ``verify`` agrees."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "mix" / "mix.toml"
CLIENT_LAG = {"client_overloaded", "client_cpu_overloaded"}
"""Reasons a loaded 2-core test machine may give on its own (the client's, not the mix's)."""
SUMMED = ("issued", "completed", "failed", "cancelled", "prompt_tokens", "output_tokens")


def _mixed_run(urls_sim: Any, tmp_path: Path, *flags: str) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "runs"
    args = run_args(urls_sim, out, "--mix", str(SAMPLE), "--concurrency", "8", *flags)
    rc, text = run_soaktop(*args, "--duration", "4", timeout=120)
    run_dir = only_run_dir(out)
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text
    return rc, text, record(run_dir) | {"_lines": journal(run_dir)}


def _check_sums(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    classes = {c["name"]: c for c in rec["classes"]}
    assert list(classes) == ["chat", "long", "json"]
    assert [c["weight"] for c in classes.values()] == [6.0, 2.0, 2.0]
    for key in SUMMED:
        assert sum(c["load"][key] for c in classes.values()) == rec["load"][key], key
    failures: dict[str, int] = {}
    for c in classes.values():
        for cls, n in c["load"]["failures_by_class"].items():
            failures[cls] = failures.get(cls, 0) + n
    assert failures == rec["load"]["failures_by_class"]
    lines = [ln for ln in rec["_lines"] if ln["phase"] == "load"]
    assert {ln["workload_class"] for ln in lines} == set(classes)
    return classes


def test_a_mixed_soak_keeps_each_class_s_figures(sim, tmp_path):
    rc, text, rec = _mixed_run(
        sim, tmp_path, "--threshold", "class.json.error_rate==0", "--threshold",
        "class.long.ttft.p99<30s",
    )  # fmt: skip
    classes = _check_sums(rec)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert (rec["status"], rc) == ("PASSED", 0) or codes <= CLIENT_LAG, rec["reasons"]
    assert all(c["load"]["completed"] > 0 for c in classes.values()), classes
    # long context: its prompts were calibrated to ~1,500 tokens; chat's are short
    assert classes["long"]["load"]["input_tokens_mean"] == pytest.approx(1500, rel=0.05)
    assert classes["chat"]["load"]["input_tokens_mean"] < 100
    assert {t["condition"]: t["state"] for t in rec["thresholds"]} == {
        "class.json.error_rate==0": "ok",
        "class.long.ttft.p99<30s": "ok",
    }
    assert "class        share  done" in text and "  json          20%" in text, text
    # the runner died before its record: recover rebuilds the classes, verify agrees
    dead = tmp_path / "dead" / rec["run_id"]
    shutil.copytree(only_run_dir(tmp_path / "runs"), dead)
    for name in ("record.json", "summary.csv"):
        (dead / name).unlink()
    rc, out = run_soaktop("recover", str(dead))
    assert rc == 0, out
    rc, out = run_soaktop("verify", str(dead))
    assert rc == 0, out
    recovered = record(dead) | {"_lines": rec["_lines"]}
    assert _check_sums(recovered).keys() == classes.keys()
    assert [c["load"]["completed"] for c in recovered["classes"]] == [
        c["load"]["completed"] for c in rec["classes"]
    ]


def test_broken_json_answers_are_contract_failures_of_the_json_class(tmp_path):
    # Every load answer that carries a JSON schema comes back cut short (HTTP 200, usage
    # consistent, finish "stop"): the chat and long classes have nothing to break.
    fault = {"match": "*/load/*", "action": "json_invalid", "count": 0}
    extra = ["--decode-ms-base", "5", "--fault", json.dumps(fault)]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        rc, text, rec = _mixed_run(
            sim, tmp_path, "--threshold", "class.json.error_rate==0", "--threshold",
            "class.chat.error_rate==0",
        )  # fmt: skip
    classes = _check_sums(rec)
    json_load = classes["json"]["load"]
    assert json_load["failed"] > 0 and json_load["completed"] == 0
    assert json_load["failures_by_class"] == {"contract_error": json_load["failed"]}
    assert classes["chat"]["load"]["failed"] == classes["long"]["load"]["failed"] == 0
    broken = [ln for ln in rec["_lines"] if ln["failure"] == "contract_error"]
    assert broken and {ln["workload_class"] for ln in broken} == {"json"}
    assert all(ln["status"] == 200 and ln["detail"].startswith("not strict JSON") for ln in broken)
    assert {t["condition"]: t["state"] for t in rec["thresholds"]} == {
        "class.json.error_rate==0": "breached",
        "class.chat.error_rate==0": "ok",
    }
    invalid = {r["code"] for r in rec["reasons"] if r["effect"] == "invalid"}
    assert (rec["status"], rc) == ("FAILED", 1) or invalid <= CLIENT_LAG, rec["reasons"]
    (load_failures,) = [r for r in rec["reasons"] if r["code"] == "load_failures"]
    assert load_failures["effect"] == "failed"
    assert (
        "contract_error (complete answers that broke their workload class"
        in (load_failures["message"])
    )
    assert "contract_error" in text and "threshold class.json.error_rate==0: breached" in text
