"""Open-loop arrivals against the simulated engine (issue 16 §1): the schedule is held and
journaled, bursts show as in-flight peaks, and a rate the cap cannot carry is INVALID."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from soak.cli.demo import SimHandle, simulated_engine
from tests.e2e.conftest import CLIENT_LAG, journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e


Line = dict[str, Any]


def _open_loop_run(
    sim: SimHandle, tmp_path: Path, *flags: str
) -> tuple[int, str, dict[str, Any], list[Line]]:
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, "--max-tokens", "16", *flags), timeout=120)
    run_dir = only_run_dir(out)
    return rc, text, record(run_dir), journal(run_dir)


def _gaps(lines: list[Line]) -> np.ndarray:
    intended = np.sort([ln["intended_s"] for ln in lines if ln["phase"] == "load"])
    return np.diff(intended)


def _in_flight_peak(lines: list[Line]) -> int:
    moments = sorted(
        [(ln["sent_s"], 1) for ln in lines] + [(ln["end_s"], -1) for ln in lines if ln["end_s"]]
    )
    level = peak = 0
    for _, step in moments:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize(("model", "cv"), [("constant", 0.0), ("poisson", 1.0)])
def test_a_rate_the_client_holds_is_achieved_and_journaled(sim, tmp_path, model, cv):
    rc, text, rec, lines = _open_loop_run(
        sim, tmp_path, "--arrival", model, "--rate", "20", "--duration", "15"
    )
    load = rec["load"]
    assert load["achieved_rate"] == pytest.approx(load["offered_rate"], rel=0.05), text
    if model == "constant":
        assert load["offered_rate"] == pytest.approx(20.0, rel=0.01)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] == "invalid"}
    assert "rate_not_achieved" not in codes, rec["reasons"]
    assert (rec["status"], rc) == ("PASSED", 0) or codes <= CLIENT_LAG, rec["reasons"]
    assert load["lateness_s"]["n"] == len(lines) and load["held_by_cap"] == 0
    gaps = _gaps(lines)
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.15)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=0.2)
    assert "open loop: offered" in text and "achieved" in text
    assert {c["code"] for c in rec["caveats"]} >= {"open_loop"}
    run_dir = str(only_run_dir(tmp_path / "runs"))
    rc_verify, verify_text = run_soaktop("verify", run_dir)
    assert rc_verify == 0, verify_text
    _, table = run_soaktop("compare", run_dir, run_dir)
    assert "Offered → achieved req/s" in table and f"{model} 20.0 req/s" in table, table


def test_gamma_bursts_show_as_in_flight_peaks(sim, tmp_path):
    _, text, rec, lines = _open_loop_run(
        sim, tmp_path, "--arrival", "gamma", "--burstiness", "3", "--rate", "20", "--duration", "15"
    )
    load = rec["load"]
    gaps = _gaps(lines)
    assert gaps.std() / gaps.mean() > 2.0, text  # one seeded draw of a CV-3 schedule
    # Little's law: the mean in flight is the rate times the mean time a request takes.
    mean_in_flight = sum(ln["e2e_s"] or 0 for ln in lines) / load["issue_s"]
    assert _in_flight_peak(lines) >= 3 * max(mean_in_flight, 1.0), (mean_in_flight, text)


def test_a_rate_beyond_the_cap_is_invalid_with_the_achieved_rate(tmp_path):
    with simulated_engine(replicas=1, extra_args=["--decode-ms-base", "50"]) as slow:
        rc, _, rec, lines = _open_loop_run(
            slow,
            tmp_path,
            *("--arrival", "poisson", "--rate", "20", "--max-in-flight", "2", "--duration", "5"),
        )
    load = rec["load"]
    assert (rec["status"], rc) == ("INVALID", 3), rec["reasons"]
    (reason,) = [r for r in rec["reasons"] if r["code"] == "rate_not_achieved"]
    assert reason["effect"] == "invalid"
    assert f"achieved {load['achieved_rate']:.1f} req/s" in reason["message"]
    assert load["achieved_rate"] < 0.5 * load["offered_rate"]
    assert load["held_by_cap"] > 0 and _in_flight_peak(lines) <= 2
    # Latency from the schedule includes the wait for a slot: far above the send-relative one.
    assert load["e2e_from_intended_s"]["p50"] > 2 * load["e2e_s"]["p50"]
