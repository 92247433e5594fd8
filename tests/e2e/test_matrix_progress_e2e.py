"""The matrix's live progress in the runner's snapshots: the runner as its own process
against the simulated engine. What the monitor and the headless lines show of a matrix
is only what these lines carry (schema 1.3's ``matrix`` section); a soak's never do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soak.cli.demo import SimHandle
from tests.e2e.conftest import only_run_dir, record, run_args, run_soaktop

MATRIX = "input=64,512 concurrency=1,3 reps=2 requests=3 warmup=1"


def _snapshots(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "snapshots.jsonl").read_text().splitlines()]


def test_matrix_snapshots_follow_cell_rep_and_requests_to_the_record(
    sim: SimHandle, tmp_path: Path
) -> None:
    out = tmp_path / "m"
    rc, text = run_soaktop(
        *run_args(sim, out, "--matrix", MATRIX, "--max-tokens", "16", "--ignore-eos"),
        timeout=180,
    )
    assert rc == 0, text
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    progress = [s["matrix"] for s in _snapshots(run_dir) if "matrix" in s]
    assert progress, "no snapshot carried the matrix's progress"
    for m in progress:
        assert (m["cells"], m["reps"], m["requests"]) == (4, 2, 3)
        assert m["phase"] in ("preparing", "warmup", "rep", "done")
        if m["phase"] == "rep":
            assert 1 <= m["rep"] <= 2 and m["batch_requests"] == 3
        if m["phase"] in ("rep", "warmup"):
            assert m["batch_done"] + m["batch_failed"] <= m["batch_requests"]
    # cells finish in order and stay finished
    done = [len(m["finished"]) for m in progress]
    assert done == sorted(done) and done[-1] == 4
    last = progress[-1]
    assert last["phase"] == "done"
    # the finished cells' figures are the record's, to the last digit
    for now, cell in zip(last["finished"], rec["matrix"]["cells"], strict=True):
        assert now["label"] == f"~{cell['input_tokens_target']} / C{cell['concurrency']}"
        for key in ("e2e_median_s", "ttft_content_median_s", "completed", "failed"):
            assert now[key] == cell[key], key
        assert now["input_tokens_mean"] == cell["input_tokens_mean"]
    # the headless lines said where the matrix was, not a soak's plan
    assert "[cell 1/4 ~64/C1 · " in text and "matrix done · 4/4 cells" in text, text


def test_a_soaks_snapshots_carry_no_matrix_section(sim: SimHandle, tmp_path: Path) -> None:
    out = tmp_path / "s"
    rc, text = run_soaktop(
        *run_args(sim, out, "--duration", "2", "--concurrency", "2", "--max-tokens", "8"),
        timeout=120,
    )
    assert rc == 0, text
    snaps = _snapshots(only_run_dir(out))
    assert snaps and all("matrix" not in s for s in snaps)
