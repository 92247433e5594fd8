"""Two serving recipes end to end: two simulated engines that differ in ``--max-num-seqs``
and ``--gpu-memory-utilization``, one short run against each, and ``soaktop compare``
heading each column with what differs (seed 000's "32 slots/replica · 95% allocation").

The slots come from the engine's ``/server_info`` and the memory target from its
``vllm:cache_config_info`` (``soak.run.recipe_probe``, ``soak.run.identity``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import only_run_dir, run_args, run_soaktop


def _recipe_run(tmp_path: Path, label: str, seqs: int, memory: float) -> Path:
    out = tmp_path / label
    extra = ["--max-num-seqs", str(seqs), "--gpu-memory-utilization", str(memory)]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        args = run_args(sim, out, "--label", label, "--concurrency", "2", "--max-requests", "6")
        rc, text = run_soaktop(*args, "--max-tokens", "4", timeout=120)
    assert rc == 0, text
    return only_run_dir(out)


def test_two_recipes_get_their_own_column_headers(tmp_path):
    base = _recipe_run(tmp_path, "base", 16, 0.9)
    cand = _recipe_run(tmp_path, "cand", 32, 0.95)
    rc, text = run_soaktop("compare", str(base), str(cand), "--json")
    assert rc == 0, text
    out = json.loads(text)
    base_head, cand_head = (h["header"] for h in out["headers"])
    assert base_head.startswith("base · 16 slots/replica · 90% GPU memory"), base_head
    assert cand_head.startswith("cand · 32 slots/replica · 95% GPU memory"), cand_head
    assert out["rows"][0] == ["Run", base.name, cand.name]  # the run ids stay in the table
    assert out["same_recipe"] is None
    rc, table = run_soaktop("compare", str(base), str(cand))
    assert rc == 0 and table.splitlines()[0].split("  ")[0] == "Measurement", table
    assert "cand · 32 slots/replica · 95% GPU memory" in table.splitlines()[0]
    # the results CSV of the folder carries each recipe in one line and the status label
    rc, text = run_soaktop("runs", str(tmp_path / "cand"), "--csv", "-")
    assert rc == 0, text
    (row,) = csv.DictReader(text.splitlines())
    assert row["status_label"] == "PASSED" and "32 slots/replica · 95% GPU memory" in row["recipe"]
