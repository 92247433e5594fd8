"""Trace replay against the simulated engine (issue 16 §1, §5): each shipped sample is
replayed at its own times (scaled) with its own token counts, and shared prefixes show as
prefix-cache hits on the engine's /metrics."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import orjson
import pytest

from loadgen.trace_source import on_target
from loadgen.traces import load_trace
from soak.cli.demo import SimHandle
from tests.e2e.conftest import CLIENT_LAG, journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "traces"
SCALE = 4.0


def _prefix_hits(sim: SimHandle) -> float:
    total = 0.0
    for url in sim.urls:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        total += sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:prefix_cache_hits_total")
        )
    return total


@pytest.mark.parametrize(
    ("name", "shares_prefixes"),
    [
        ("mooncake_sample.jsonl", True),
        ("azure_sample.csv", False),
        ("burstgpt_sample.csv", False),
        ("soaktop_sample.jsonl", True),
    ],
)
def test_a_replay_keeps_the_traces_times_and_token_counts(sim, tmp_path, name, shares_prefixes):
    path = SAMPLES / name
    trace = load_trace(path)
    hits_before = _prefix_hits(sim)
    out = tmp_path / "runs"
    flags = ("--arrival", f"trace:{path}", "--time-scale", str(SCALE), "--ignore-eos")
    rc, text = run_soaktop(*run_args(sim, out, *flags), timeout=120)
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    load = rec["load"]
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert (rec["status"], rc) == ("PASSED", 0) or codes <= CLIENT_LAG, (rec["reasons"], text)
    assert load["stop_reason"] == "trace replayed" and "replaying" in text
    sent = {ln["prompt"]: ln for ln in lines if ln["phase"] == "load"}
    assert sorted(sent) == list(range(len(trace.arrivals)))  # arrival k sends line k
    for k, arrival in enumerate(trace.arrivals):
        line = sent[k]
        assert line["intended_s"] - load["issue_start_s"] == pytest.approx(
            arrival.offset_s / SCALE, abs=1e-3
        )
        assert line["output_tokens"] == arrival.output_tokens  # ignore_eos: all generated
        assert on_target(arrival.input_tokens, line["prompt_tokens"]), (k, line)
    span = trace.duration_s / SCALE
    assert load["issue_s"] == pytest.approx(span, abs=0.1)  # the run lasts the trace
    assert load["offered_rate"] == pytest.approx(len(trace.arrivals) / span, rel=0.05)
    facts = rec["identity"]["prompt_pool"]["trace"]
    assert (facts["format"], facts["sha256"]) == (trace.format, trace.sha256)
    assert (facts["arrivals"], facts["time_scale"]) == (len(trace.arrivals), SCALE)
    assert facts["calibration_worst_tokens"] <= 2
    assert "trace_replay" in {c["code"] for c in rec["caveats"]}
    # The monitor's open-loop line: the replay's own times are its offer, no target rate.
    views = [
        snap["open_loop"]
        for raw in (run_dir / "snapshots.jsonl").read_bytes().splitlines()
        if (snap := orjson.loads(raw)).get("open_loop")
    ]
    assert views and all(v["arrival"] == "trace" and v["rate"] is None for v in views)
    assert views[-1]["offered_per_s"] == pytest.approx(load["offered_rate"], rel=0.25)
    hits = _prefix_hits(sim) - hits_before
    assert hits > 0 if shares_prefixes else hits == 0, hits
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text


def test_a_duration_shorter_than_the_trace_shortens_the_replay(sim, tmp_path):
    path = SAMPLES / "azure_sample.csv"
    trace = load_trace(path)
    out = tmp_path / "runs"
    flags = ("--arrival", f"trace:{path}", "--time-scale", "2", "--duration", "1")
    _, text = run_soaktop(*run_args(sim, out, "--max-tokens", "8", *flags), timeout=120)
    rec = record(only_run_dir(out))
    assert "shortened by --duration 1 s" in text, text
    expected = sum(1 for a in trace.arrivals if a.offset_s / 2 < 1.0)
    assert rec["load"]["issued"] == expected < len(trace.arrivals)
    assert rec["load"]["stop_reason"] == "issue window complete"
