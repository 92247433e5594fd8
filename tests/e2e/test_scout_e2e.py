"""The matrix profile end to end: the runner as its own process against the simulated
engine, records that verify, prompts that match across arms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soak.cli.demo import SimHandle
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

MATRIX = "input=64,512 concurrency=1,3 reps=2 requests=3 warmup=1"


def _matrix_run(sim: SimHandle, out: Path, *extra: str) -> dict[str, Any]:
    rc, text = run_soaktop(
        *run_args(sim, out, "--matrix", MATRIX, "--max-tokens", "16", "--ignore-eos", *extra),
        timeout=180,
    )
    assert rc == 0, text
    return record(only_run_dir(out))


def test_matrix_cells_reps_and_a_record_that_verifies(sim, tmp_path):
    rec = _matrix_run(sim, tmp_path / "a")
    run_dir = only_run_dir(tmp_path / "a")
    m = rec["matrix"]
    assert [(c["input_tokens_target"], c["concurrency"]) for c in m["cells"]] == [
        (64, 1),
        (64, 3),
        (512, 1),
        (512, 3),
    ]
    assert rec["load"] is None and m["not_run"] == []
    for cell in m["cells"]:
        assert [r["rep"] for r in cell["reps"]] == [1, 2]
        assert cell["completed"] == 6 and cell["failed"] == 0
        assert cell["warmup_requests"] == cell["concurrency"]
        # every timed request reached the server and back: tokens per rep reconcile
        assert all(r["reconciliation"]["matched"] is True for r in cell["reps"]), cell
        assert all(len(r["e2e_s"]) == 3 and r["output_tokens"] == [16] * 3 for r in cell["reps"])
        # the actual input (server usage) beside the nominal target, never the target itself
        assert cell["input_tokens_mean"] >= cell["input_tokens_target"]
        # engine occupancy sampled beside the client's concurrency: never above it
        assert 1 <= cell["max_running"] <= cell["concurrency"] * 2  # two replicas
        assert cell["e2e_median_s"] > 0 and cell["e2e_p50_nearest_s"] > 0
    lines = journal(run_dir)
    phases = {ln["phase"] for ln in lines}
    assert phases == {"warmup", "matrix"}
    assert sum(ln["phase"] == "matrix" for ln in lines) == 4 * 2 * 3
    assert [r["code"] for r in rec["reasons"]] == ["matrix_clean"]
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0 and "matrix (4 cells) recomputed from 24 journaled requests" in text, text


def test_the_same_pool_seed_sends_the_same_prompts_in_every_arm(sim, tmp_path):
    a = _matrix_run(sim, tmp_path / "a", "--pool-seed", "7")
    b = _matrix_run(sim, tmp_path / "b", "--pool-seed", "7")
    c = _matrix_run(sim, tmp_path / "c", "--pool-seed", "8")

    def hashes(rec: dict[str, Any]) -> list[str]:
        return [cell["prompt_pool_sha256"] for cell in rec["matrix"]["cells"]]

    assert hashes(a) == hashes(b)
    assert len(set(hashes(a))) == 4  # each cell its own unique prompts
    assert not set(hashes(a)) & set(hashes(c))


SCOUT = "input=64,2048 concurrency=1 reps=3 requests=3 warmup=1"


def _arm(tmp_path: Path, name: str, prefill_us: int) -> str:
    """One arm of a scout: a simulated engine whose prefill costs ``prefill_us`` per input
    token (decode 20 ms a token), soaked with the scout's matrix; the run directory."""
    from soak.cli.demo import simulated_engine

    out = tmp_path / name
    extra = ["--prefill-us-per-token", str(prefill_us), "--decode-ms-base", "20"]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        args = run_args(sim, out, "--matrix", SCOUT, "--max-tokens", "16", "--ignore-eos")
        rc, text = run_soaktop(*args, "--pool-seed", "3", timeout=240)
    assert rc == 0, text
    return str(only_run_dir(out))


def test_decide_promotes_only_a_material_win_against_both_controls(tmp_path):
    """Prefill 200 µs/token in the original: a 2048-token prompt costs ~410 ms before 16
    tokens at 20 ms. A candidate at 20 µs/token is faster only at the long-input cell
    (~50 %; ~4 % at 64 tokens): promote. A candidate at 170 µs/token beside a restored
    original that came back slower (260 µs/token) beats only the restored control (the
    seed-004 ~6K/C4 case): retain."""
    import orjson

    before = _arm(tmp_path, "before", 200)
    fast = _arm(tmp_path, "fast", 20)
    restored = _arm(tmp_path, "restored", 200)
    rc, text = run_soaktop(
        "decide", "--before", before, "--candidate", fast, "--restored", restored, "--json"
    )
    assert rc == 0, text
    d = orjson.loads(text)
    assert d["decision"] == "promote" and (d["wins"], d["cells_total"]) == (1, 2), text
    short, long = d["cells"]
    assert short["verdict"] == "no win" and long["verdict"] == "win"
    assert long["gain_vs_before_pct"] > 30 and long["gain_vs_restored_pct"] > 30
    assert abs(short["gain_vs_before_pct"]) < 10

    slower_restored = _arm(tmp_path, "restored-slow", 260)
    near = _arm(tmp_path, "near", 170)
    rc, text = run_soaktop(
        "decide", "--before", before, "--candidate", near, "--restored", slower_restored
    )
    assert rc == 0, text
    assert "retain original" in text and "0/2" in text, text
    # the long cell beat the restored control by more than 10 % but not the before one
    rc, js = run_soaktop(
        "decide", "--before", before, "--candidate", near, "--restored", slower_restored,
        "--json",
    )  # fmt: skip
    long = orjson.loads(js)["cells"][1]
    assert long["gain_vs_restored_pct"] > 10 > long["gain_vs_before_pct"], long
    assert long["verdict"] == "no win"


def test_a_matrix_runner_killed_mid_way_is_recovered_with_its_cells(sim, tmp_path):
    """kill -9 during the third cell: recover rebuilds the cells done from the journals,
    lists the ones never reached, and the record verifies."""
    import os
    import signal
    import time

    from tests.e2e.conftest import soaktop
    from tests.e2e.test_signals_e2e import _pid_from_log

    out = tmp_path / "runs"
    spec = "input=64,128,256 concurrency=1,2 reps=2 requests=3 warmup=0"
    p = soaktop(*run_args(sim, out, "--matrix", spec, "--max-tokens", "16", "--ignore-eos"))
    deadline = time.monotonic() + 120
    run_dir = None
    while time.monotonic() < deadline:
        dirs = [d for d in out.glob("*") if d.is_dir()] if out.exists() else []
        if dirs and any(
            ev["kind"] == "phase" and ev["data"].get("cell") == 2
            for ev in journal(dirs[0], "events.jsonl")
        ):
            run_dir = dirs[0]
            break
        time.sleep(0.1)
    assert run_dir is not None, "the matrix never reached its third cell"
    os.kill(_pid_from_log(run_dir), signal.SIGKILL)
    p.communicate(timeout=30)
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc == 0, text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED" and rec["recovered"] is True
    cells = rec["matrix"]["cells"]
    assert [(c["input_tokens_target"], c["concurrency"]) for c in cells[:2]] == [(64, 1), (64, 2)]
    assert all(c["completed"] == 6 and len(c["prompt_pool_sha256"]) == 64 for c in cells[:2])
    assert "~256 / C2" in rec["matrix"]["not_run"]
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text
