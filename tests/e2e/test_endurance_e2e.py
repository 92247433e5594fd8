"""The soak judged as a soak, end to end: degraded engines fail with the right reason and
the moment it began; healthy noisy engines raise nothing (issue 14, §5).

Each run is a real ``soaktop demo`` (the simulated engine with its endurance scenarios
and its noise, the runner in its own process) of 90 s cut into 5 s windows. The runs of
one test go side by side (32 workers on one replica each: enough requests in a 5 s window
that the throughput of a window is not its own noise) so the tier stays short.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import only_run_dir, record, run_soaktop, soaktop

pytestmark = pytest.mark.e2e

DURATION_S = 90
WINDOW_S = 5
ONSET_S = {"slow-leak": 30.0, "throughput-decay": 30.0, "garbage-after": 40.0}


def _demos(tmp_path: Path, runs: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Start every demo at once, wait for all; each run's record, verified."""
    procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for name, extra in runs.items():
        out = tmp_path / name
        args = [
            *("demo", "--headless", "--duration", str(DURATION_S), "--window", str(WINDOW_S)),
            *("--concurrency", "32", "--replicas", "1", "--gpus-per-replica", "1"),
            *("--gates", "smoke", "--canary-interval", "0", "--out", str(out)),
            *extra,
        ]
        procs[name] = (soaktop(*args), out)
    records = {}
    for name, (proc, out) in procs.items():
        text, _ = proc.communicate(timeout=DURATION_S + 150)
        run_dir = only_run_dir(out)
        rc, verified = run_soaktop("verify", str(run_dir))
        assert rc == 0, f"{name}: verify\n{verified}"
        records[name] = record(run_dir) | {"_output": text}
    return records


def _finding(rec: dict[str, Any], figure: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in rec["endurance"]["drift"] if f["figure"] == figure]
    assert found, figure
    return found[0]


def _leak(rec: dict[str, Any], resource: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        f for f in rec["endurance"]["leaks"] if f["resource"] == resource
    ]
    assert found, resource
    return found[0]


def _codes(rec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["code"], r["effect"]) for r in rec["reasons"]]


def _near_onset(rec: dict[str, Any], since_s: float | None, scenario: str) -> None:
    """The finding began within one window of the moment the engine began to degrade
    (its clock starts with the first load request, at the barrier's release)."""
    injected = rec["load"]["issue_start_s"] + ONSET_S[scenario]
    assert since_s is not None, rec["endurance"]
    assert abs(since_s - injected) <= WINDOW_S, (since_s, injected)


def test_degraded_engines_fail_with_the_reason_and_its_moment(tmp_path: Path) -> None:
    recs = _demos(
        tmp_path,
        {
            name: ["--scenario", name, "--scenario-at", f"{ONSET_S[name]:g}"]
            for name in ("slow-leak", "throughput-decay", "garbage-after")
        },
    )
    for name, rec in recs.items():
        assert rec["status"] == "FAILED", (name, rec["reasons"])
        assert rec["endurance"]["judged"] is True, rec["endurance"]
        assert len(rec["windows"]) >= DURATION_S // WINDOW_S

    leak = recs["slow-leak"]
    assert ("endurance_drift", "failed") in _codes(leak), leak["reasons"]
    assert ("endurance_leak", "failed") in _codes(leak), leak["reasons"]
    ttft = _finding(leak, "ttft.p99")
    assert ttft["state"] == "drift" and ttft["change"] > 1.0, ttft
    # when the TTFT creep began: the earliest of its TTFT findings (a one-window spike in
    # the p99 tail can make a step fit place the p99's own onset a few windows late)
    creeps = [_finding(leak, f) for f in ("ttft.p50", "ttft.p99")]
    _near_onset(leak, min(f["since_s"] for f in creeps if f["state"] == "drift"), "slow-leak")
    rss = _leak(leak, "server_rss")
    assert rss["state"] == "leak" and rss["rate_per_h"] > 1000, rss  # MB/h: real memory held
    assert "monotone since load+" in ttft["words"]

    decay = recs["throughput-decay"]
    tput = _finding(decay, "output_tok_s")
    assert tput["state"] == "drift" and tput["change"] < -0.2, tput
    _near_onset(decay, tput["since_s"], "throughput-decay")
    assert any(
        r["code"] == "endurance_drift" and "throughput" in r["message"] for r in decay["reasons"]
    ), decay["reasons"]

    garbage = recs["garbage-after"]
    assert ("load_sanity", "failed") in _codes(garbage), garbage["reasons"]
    flagged = _finding(garbage, "sanity_rate")
    assert flagged["state"] == "drift", flagged
    _near_onset(garbage, flagged["since_s"], "garbage-after")
    assert garbage["load"]["sanity_flagged"] > 0
    early = [w for w in garbage["windows"] if w["end_s"] <= garbage["load"]["issue_start_s"] + 40]
    assert early and all(w["sanity_rate"] == 0 for w in early if w["completed"])


def test_healthy_noisy_engines_raise_no_drift_or_leak_across_seeds(tmp_path: Path) -> None:
    recs = _demos(tmp_path, {f"seed{n}": ["--seed", str(n)] for n in range(1, 6)})
    for name, rec in recs.items():
        e = rec["endurance"]
        assert e["judged"] is True and e["policy_source"] == "default", (name, e)
        assert rec["status"] == "PASSED", (name, rec["reasons"])
        assert not [c for c, _ in _codes(rec) if c.startswith("endurance")], rec["reasons"]
        trend = [t for t in rec["thresholds"] if t["metric"].startswith(("drift.", "leak."))]
        assert trend and all(t["state"] == "ok" for t in trend), (name, trend)
        # at the default policy nothing was raised and nothing leaked; a figure's own
        # finding may still say it crept within its bound (five soaks share two cores)
        assert not [f["resource"] for f in e["leaks"] if f["state"] == "leak"], name
        assert "endurance: " in rec["_output"] and "not ok:" not in rec["_output"]


def test_a_run_too_short_for_a_trend_says_so_and_passes(tmp_path: Path) -> None:
    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "12", "--window", "5", "--concurrency", "4"),
        *("--replicas", "1", "--gpus-per-replica", "1", "--no-gates", "--out", str(tmp_path)),
        timeout=150,
    )
    assert rc == 0, out
    rec = record(only_run_dir(tmp_path))
    e = rec["endurance"]
    assert e["judged"] is False and "a trend needs" in e["not_judged_why"], e
    assert all(f["state"] == "no_data" for f in e["drift"]), e["drift"]
    assert "endurance: not judged" in out


def test_a_warmup_is_journaled_apart_and_left_out_of_the_judged_figures(tmp_path: Path) -> None:
    rc, out = run_soaktop(
        *("demo", "--headless", "--duration", "20", "--window", "5", "--warmup", "6s"),
        *("--concurrency", "4", "--replicas", "1", "--gpus-per-replica", "1", "--no-gates"),
        *("--out", str(tmp_path)),
        timeout=150,
    )
    assert rc == 0, out
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    load, e = rec["load"], rec["endurance"]
    lines = [x for x in (run_dir / "requests.jsonl").read_text().splitlines() if x]
    warm = [x for x in lines if '"phase":"warmup"' in x]
    assert warm and e["warmup"]["requests"] == len(warm) and e["warmup"]["spec"] == "6s"
    assert load["completed"] + load["failed"] + load["cancelled"] == len(lines) - len(warm)
    released = [ev for ev in _events(run_dir) if ev["kind"] == "warmup"]
    assert released and abs(released[0]["data"]["end_s"] - load["issue_start_s"]) < 1e-6
    assert (
        e["series_start_s"] >= load["issue_start_s"]
        and rec["windows"][0]["start_s"] == e["series_start_s"]
    )
    assert load["issue_s"] == pytest.approx(14.0, abs=0.5)  # 20 s less the 6 s warm-up
    rc, verified = run_soaktop("verify", str(run_dir))
    assert rc == 0, verified


def _events(run_dir: Path) -> list[dict[str, Any]]:
    import orjson

    return [orjson.loads(x) for x in (run_dir / "events.jsonl").read_bytes().splitlines() if x]
