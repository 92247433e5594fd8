"""Per-shard health in a real sharded run's snapshots, and ``--shards auto`` from the CLI
(issue 17 §1, §3)."""

from __future__ import annotations

import json

import pytest

from soak.record.split_read import usable_cores
from soak.run.config_shards import auto_shards
from tests.e2e.conftest import journal, only_run_dir, run_args, run_soaktop

pytestmark = pytest.mark.e2e


def test_a_sharded_runs_snapshots_carry_each_shard(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--concurrency", "8", "--duration", "3")
    rc, text = run_soaktop(*args, "--max-tokens", "16", timeout=90)
    assert rc in (0, 3), text  # a busy 2-core machine may judge the client (INVALID)
    run_dir = only_run_dir(out)
    snaps = journal(run_dir, "snapshots.jsonl")
    loading = [s for s in snaps if s["phase"] == "load" and "shards" in s]
    assert loading, text
    last = loading[-1]["shards"]
    assert [(s["index"], s["workers"]) for s in last] == [(0, 4), (1, 4)]
    assert all(s["status"] == "running" and s["requests"] > 0 for s in last), last
    assert all(s["last_heartbeat_age_s"] is not None for s in last), last
    assert all(s["last_heartbeat_age_s"] < 3 for s in last), last
    final = snaps[-1]["shards"]  # after the drain: every shard done, its requests counted
    assert [s["status"] for s in final] == ["done", "done"]
    record = json.loads((run_dir / "record.json").read_text())
    assert [s["requests"] for s in final] == [s["requests"] for s in record["shards"]]


def test_auto_is_accepted_and_resolved_on_the_command_line(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "auto", "--concurrency", "4", "--duration", "1")
    rc, text = run_soaktop(*args, "--max-tokens", "8", timeout=90)
    run_dir = only_run_dir(out)
    config = json.loads((run_dir / "config.json").read_text())
    n, words = auto_shards(4, usable_cores(), server_local=True)
    assert (config["shards"], config["shards_auto"]) == (n, words), text
    assert words.startswith("auto: 1 shard (")  # 4 streams need one, however many cores
    assert "the server is on this host and shares its cores" in words
    assert rc in (0, 3), text
