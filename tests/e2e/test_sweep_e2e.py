"""A sweep against a simulated engine that saturates (issue 16 §4, §5): each step its own
figures after its settle, goodput under an SLO, the knee where goodput stops rising, and
a step the client could not hold named as not achieved."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e


def test_goodput_stops_rising_where_the_engine_saturates_and_the_knee_says_so(
    tmp_path: Path,
) -> None:
    # Two running slots at 20 ms a token: two requests at a time, the rest queue (TTFT).
    saturating = ["--max-num-seqs", "2", "--decode-ms-base", "20", "--decode-ms-per-seq", "0"]
    out = tmp_path / "runs"
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=saturating) as sim:
        _rc, text = run_soaktop(
            *run_args(sim, out, "--max-tokens", "8", "--ignore-eos"),
            *("--sweep", "concurrency=1,2,8", "--step-duration", "3", "--settle", "0.5"),
            *("--slo", "ttft<100ms"),
            timeout=120,
        )
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    one, two, eight = rec["steps"]
    assert [s["settle_s"] for s in rec["steps"]] == [0.5, 0.5, 0.5]
    # The settle's head is left out: no step-0 request sent in its first 0.5 s counts.
    lines = [ln for ln in journal(run_dir) if ln["phase"] == "load" and ln["step"] == 0]
    settled = [ln for ln in lines if ln["sent_s"] >= one["start_s"] + 0.5]
    assert one["load"]["issued"] == len(settled) < len(lines)
    assert one["load"]["issue_s"] == pytest.approx(2.5, abs=0.01)
    # Throughput doubles from 1 to 2 and then holds: the engine runs two at a time.
    assert two["load"]["requests_per_s"] > 1.6 * one["load"]["requests_per_s"], text
    assert eight["load"]["requests_per_s"] < 1.3 * two["load"]["requests_per_s"], text
    # At 8 the queue's TTFT breaks the SLO: goodput falls while latency climbs.
    assert eight["goodput"] < two["goodput"] and eight["load"]["ttft_s"]["p99"] > 0.1
    assert rec["sweep"]["knee_step"] == 1 and rec["sweep"]["slo"] == ["ttft<0.1s"]
    assert "goodput" in rec["sweep"]["rule"]
    assert "1: concurrency=2 (knee)" in text and "knee step 1 (concurrency=2)" in text
    rc_verify, words = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, words
    _, page_words = run_soaktop("report", str(run_dir))
    page = (run_dir / "report.html").read_text()
    assert "concurrency=2 (knee)" in page, page_words
    # The throughput–latency curve: one point per step, the knee marked on it.
    assert 'id="chart-steps-curve"' in page and 'href="#steps"' in page
    assert "Throughput and latency per step" in page and '"text":"knee"' in page


def test_a_sweep_step_the_cap_cannot_carry_is_named_not_achieved(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with simulated_engine(replicas=1, extra_args=["--decode-ms-base", "50"]) as slow:
        rc, _text = run_soaktop(
            *run_args(slow, out, "--max-tokens", "8", "--arrival", "constant"),
            *("--sweep", "rate=2,40", "--step-duration", "3", "--settle", "0.5"),
            *("--max-in-flight", "2"),
            timeout=120,
        )
    rec = record(only_run_dir(out))
    low, high = rec["steps"]
    assert low["load"]["achieved_rate"] == pytest.approx(low["load"]["offered_rate"], rel=0.05)
    assert high["load"]["achieved_rate"] < 0.5 * high["load"]["offered_rate"]
    assert high["load"]["held_by_cap"] > 0 and low["load"]["held_by_cap"] == 0
    step_reasons = [
        r["message"] for r in rec["reasons"] if r["message"].startswith("step 1 (rate=40)")
    ]
    offered = f"offered {high['load']['offered_rate']:.1f} req/s"
    assert len(step_reasons) == 1 and offered in step_reasons[0], rec["reasons"]
    assert not any(r["message"].startswith("step 0") for r in rec["reasons"])
    assert (rec["status"], rc) == ("INVALID", 3)
