"""A class threshold stops a mixed soak live (issue 16 §2): every JSON answer of the load
comes back cut short, so the JSON class's error rate breaks at once;
``class.json.error_rate<0.05,abort`` stops the load within seconds of a 60 s run, the
record names that class threshold as the cause, and the chat class's threshold holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "mix"
MIX = f"""
[[class]]
name = "chat"
weight = 1
prompts = "{SAMPLES / "chat.jsonl"}"
max_tokens = 16

[[class]]
name = "json"
weight = 1
prompts = "{SAMPLES / "json.jsonl"}"
max_tokens = 48

[class.response_format]
type = "json_object"
"""
JSON_ABORT = "class.json.error_rate<0.05,abort"
CHAT_ABORT = "class.chat.error_rate<0.05,abort"


def test_a_class_threshold_aborts_the_load_live_and_the_record_names_it(tmp_path):
    mix = tmp_path / "mix.toml"
    mix.write_text(MIX)
    # Every load answer that carries a response_format comes back as broken JSON (HTTP
    # 200): the JSON class's contract fails, the chat class has nothing to break.
    fault = {"match": "*/load/*", "action": "json_invalid", "count": 0}
    extra = ["--decode-ms-base", "5", "--fault", json.dumps(fault)]
    out = tmp_path / "runs"
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        rc, text = run_soaktop(
            *run_args(sim, out, "--mix", str(mix), "--concurrency", "4", "--duration", "60"),
            *("--threshold", JSON_ABORT, "--threshold", CHAT_ABORT),
            timeout=90,
        )
    assert rc == 1, text
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rec["status"] == "FAILED"
    assert rec["load"]["issue_s"] < 15, "the class threshold should have stopped issuing"
    assert "class.json.error_rate<0.05" in rec["load"]["stop_reason"]
    (abort,) = [r for r in rec["reasons"] if r["code"] == "threshold_abort"]
    assert abort["effect"] == "failed" and "stopped early" in abort["message"]
    assert abort["message"].startswith("threshold class.json.error_rate<0.05 breached at ")
    assert "aborted" not in [r["code"] for r in rec["reasons"]]  # not an operator abort
    # the end-of-run verdict is the record's exact class figures
    states = {t["condition"]: t for t in rec["thresholds"]}
    assert states["class.json.error_rate<0.05"]["state"] == "breached"
    assert states["class.json.error_rate<0.05"]["first_breach_s"] is not None
    assert states["class.json.error_rate<0.05"]["source"].startswith("record (exact")
    assert states["class.chat.error_rate<0.05"]["state"] == "ok"
    assert states["class.chat.error_rate<0.05"]["first_breach_s"] is None
    classes = {c["name"]: c["load"] for c in rec["classes"]}
    assert classes["json"]["failed"] > 0 and classes["chat"]["failed"] == 0
    # the snapshots carried the class thresholds' live states, as the load's
    live = [
        {t["condition"]: t["state"] for t in s["thresholds"]}
        for s in journal(run_dir, "snapshots.jsonl")
        if s["phase"] == "load"
    ]
    assert any(ts.get("class.json.error_rate<0.05") == "breached" for ts in live), live
    assert all(ts.get("class.chat.error_rate<0.05") != "breached" for ts in live), live
    assert "class.json.error_rate<0.05" in text
