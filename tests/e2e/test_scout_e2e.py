"""The matrix profile end to end: the runner as its own process against the simulated
engine, records that verify, prompts that match across arms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soak.cli.demo import SimHandle
from tests.e2e.conftest import (
    journal,
    only_run_dir,
    record,
    run_args,
    run_soaktop,
    wait_for_phase,
)

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
    # the controls (200 vs 260 µs/token) are more than 10% apart there: inconclusive
    assert long["verdict"] == "inconclusive", long
    assert "controls_disagree" in long["inconclusive_reasons"], long


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


# --- soaktop scout: the whole A/B/A from one command --------------------------------------

SCOUT_MATRIX = "input=64,128 concurrency=1,2 reps=3 requests=4"
SECRET = "hf_scoutsecret0123456789"


def _free_port_pair() -> int:
    """A loopback port P with P+100 free too (the simulated engine's DCGM exporter)."""
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 100 >= 65536:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 100))
            except OSError:
                continue
        return port
    raise AssertionError("no free loopback port pair")


def _readme_switch_script() -> str:
    """The README's switch-sim.sh, exactly as the README shows it."""
    import re

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```bash\n(#!/usr/bin/env bash\n# switch-sim\.sh.*?)```", readme, re.S)
    assert len(blocks) == 1, "the README's switch-sim.sh example is gone"
    return str(blocks[0])


def _scout(
    tmp_path: Path,
    script: str,
    port: int,
    *extra: str,
    matrix: str = SCOUT_MATRIX,
    timeout: float = 150,
) -> tuple[int, str]:
    """``soaktop scout`` in ``tmp_path`` (the switch's working directory) with the
    script as both arms' switch; the simulated engine it leaves is stopped afterwards."""
    import os
    import signal
    import subprocess
    import sys

    switch = tmp_path / "switch-sim.sh"
    switch.write_text(script)
    switch.chmod(0o755)
    env = os.environ | {
        "PYTHONUNBUFFERED": "1",
        "PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = [
        sys.executable, "-m", "soak", "scout",
        "--arm", f"original=HF_TOKEN={SECRET} ./switch-sim.sh original",
        "--arm", "candidate=./switch-sim.sh candidate",
        "--endpoint", f"http://127.0.0.1:{port}", "--model", "tiny-sim",
        "--matrix", matrix, "--max-tokens", "16", "--ignore-eos", "--no-gates",
        "--headless", "--interval", "1", "--pool-seed", "5", "--out", "runs",
        "--switch-timeout", "60", *extra,
    ]  # fmt: skip
    try:
        p = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        pid_file = tmp_path / "sim.pid"
        if pid_file.exists():
            with __import__("contextlib").suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    return p.returncode, p.stdout + p.stderr


def _scout_dir(tmp_path: Path) -> Path:
    dirs = list((tmp_path / "runs").glob("scout__*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def _no_secret_in(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_scout_runs_original_candidate_restored_and_decides(tmp_path):
    """The README's switch script, both arms on one port: three runs, each its own
    directory with a record; the restored original checked against the original before
    its load; the seed-004 table in decision.md; the secret in a command never on disk."""
    import re

    import orjson

    rc, text = _scout(tmp_path, _readme_switch_script(), _free_port_pair())
    assert rc == 0, text
    sdir = _scout_dir(tmp_path)
    summary = orjson.loads((sdir / "scout.json").read_bytes())
    assert summary["decision"] in ("promote", "retain original"), summary["outcome"]
    assert [(s["n"], s["arm"], s["role"]) for s in summary["steps"]] == [
        (1, "original", "original"),
        (2, "candidate", "candidate"),
        (3, "original", "restored"),
    ]
    for s in summary["steps"]:
        run_dir = sdir / s["run_dir"]
        assert run_dir.parent == sdir / f"{s['n']}-{s['arm']}"
        assert (run_dir / "record.json").exists() and s["status"] == "PASSED", s
        assert (sdir / s["switch_log"]).exists() and s["problem"] is None
    restored = summary["steps"][2]
    assert restored["identity_check"].startswith("Original configuration restored"), restored
    assert restored["restoration_mismatches"] == []
    # the candidate's servers said something else (KV token slots): no "same recipe" warning
    assert summary["steps"][1]["warnings"] == []
    assert summary["steps"][1]["stated"] != summary["steps"][0]["stated"]
    (triple,) = summary["triples"]
    assert triple["decision"]["cells_total"] == 4 and triple["refused"] == []
    md = (sdir / "decision.md").read_text()
    assert "| Original before | Candidate (candidate) | Original restored |" in md, md
    # one row per cell (actual input, concurrency, three medians), below the header
    table = md.split("| Original before | Candidate (candidate) | Original restored |")[1]
    rows = table.strip().splitlines()[1:5]
    assert all(re.match(r"^\| ~\d+ \| [12] \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", r) for r in rows), (
        rows
    )
    assert "Original configuration restored" in md
    assert f"\n## Decision: {summary['decision']}\n" in md
    assert "material wins" in text and f"soaktop scout: {summary['decision']}" in text
    _no_secret_in(sdir)


DRIFTING = """#!/usr/bin/env bash
# the original comes back on another engine version the second time it is switched to
set -euo pipefail
flags=(--max-num-seqs 8 --decode-ms-base 4)
[[ "$1" == candidate ]] && flags=(--max-num-seqs 16 --decode-ms-base 4 --num-gpu-blocks 8192)
if [[ "$1" == original && -f original-once ]]; then flags+=(--version-string 0.33.0); fi
[[ "$1" == original ]] && touch original-once
if [[ -f sim.pid ]]; then
  pid=$(cat sim.pid); kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
fi
nohup soaktop sim --port "$PORT" --replicas 1 --gpus-per-replica 1 "${flags[@]}" \\
    > "sim-$1.log" 2>&1 &
echo $! > sim.pid
"""


def test_a_restored_original_on_another_version_is_refused_before_its_load(tmp_path):
    import orjson

    # the smallest matrix: this test is about the check before the third run's load
    tiny = "input=64 concurrency=1 reps=1 requests=2 warmup=0"
    rc, text = _scout(tmp_path, DRIFTING, _free_port_pair(), matrix=tiny)
    assert rc == 2, text
    assert "0.32.0" in text and "0.33.0" in text and "not the original" in text, text
    sdir = _scout_dir(tmp_path)
    summary = orjson.loads((sdir / "scout.json").read_bytes())
    assert summary["decision"] == "refused" and summary["exit_code"] == 2
    first, cand, restored = summary["steps"]
    # the runs made so far are kept, the restored arm never ran its load
    for s in (first, cand):
        assert (sdir / s["run_dir"] / "record.json").exists(), s
    assert restored["run_dir"] is None and restored["status"] is None
    assert any("engine version" in m and "0.33.0" in m for m in restored["restoration_mismatches"])
    assert not (sdir / "3-original").exists()
    assert "refused" in (sdir / "decision.md").read_text()


def test_ctrl_c_stops_the_current_run_cleanly_and_the_scout_says_what_ran(tmp_path):
    """SIGINT during the first arm's load: its runner stops and writes its record, the
    scout writes scout.json and decision.md ("incomplete") and exits 1; with --redact
    they name no endpoint and no path of this machine."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import orjson

    port = _free_port_pair()
    switch = tmp_path / "switch-sim.sh"
    switch.write_text(_readme_switch_script())
    switch.chmod(0o755)
    env = os.environ | {
        "PYTHONUNBUFFERED": "1",
        "PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    cmd = [
        sys.executable, "-m", "soak", "scout",
        "--arm", "original=./switch-sim.sh original",
        "--arm", "candidate=./switch-sim.sh candidate",
        "--endpoint", f"http://127.0.0.1:{port}", "--model", "tiny-sim",
        "--matrix", "input=64 concurrency=1 reps=1 requests=400 warmup=0",
        "--max-tokens", "16", "--ignore-eos", "--no-gates", "--headless", "--out", "runs",
        "--redact",
    ]  # fmt: skip
    p = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "runs").glob("scout__*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        run_dir = wait_for_phase(_scout_dir(tmp_path) / "1-original", "matrix", timeout=60)
        time.sleep(1.0)  # a few requests into the load
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        pid_file = tmp_path / "sim.pid"
        if pid_file.exists():
            with __import__("contextlib").suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    assert p.returncode == 1, out
    assert record(run_dir)["status"] == "ABORTED"
    sdir = _scout_dir(tmp_path)
    summary = orjson.loads((sdir / "scout.json").read_bytes())
    assert summary["decision"] == "incomplete" and summary["exit_code"] == 1, summary
    (step,) = summary["steps"]
    assert step["status"] == "ABORTED" and "aborted" in step["problem"], step
    assert (sdir / "decision.md").exists() and "incomplete" in out
    # --redact: the scout's own files hold neither the endpoint nor this machine's paths
    for name in ("scout.json", "decision.md", "switch-1-original.log"):
        text = (sdir / name).read_text()
        assert "127.0.0.1" not in text and str(tmp_path) not in text, (name, text)
