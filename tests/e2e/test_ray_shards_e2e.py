"""``--ray ADDRESS --shards N``: shards on the nodes of a Ray cluster (issue 17 §2).

A real local multi-node cluster (``ray.cluster_utils.Cluster``): a head that offers no
``soaktop_shard`` (as a GPU node would not) and two one-CPU nodes that do, every process
bound to 127.0.0.1. The runner connects to it as to any cluster.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from soak.run.ray_host import journal_dir
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop, soaktop

ray = pytest.importorskip("ray", reason="soaktop[distributed] (Ray) is not installed")
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

LAG_ONLY = {"client_overloaded", "client_cpu_overloaded", "client_behind", "in_flight_short"}
"""Reasons a busy 2-core test machine may add to a healthy run: the client's own health."""
NODE: dict[str, Any] = {
    "node_ip_address": "127.0.0.1",
    "object_store_memory": 80 << 20,
    "num_cpus": 1,
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Head (no shard resource) + two shard nodes, on loopback; fast node-death checks."""
    # Ray swaps 127.0.0.1 for the host's routable address unless told it is one machine.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    t0 = time.monotonic()
    c = Cluster(
        initialize_head=True,
        head_node_args={
            **NODE,
            "num_cpus": 0,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    for _ in range(2):
        c.add_node(**NODE, resources={"soaktop_shard": 1})
    c.wait_for_nodes()
    print(f"cluster up in {time.monotonic() - t0:.1f} s at {c.address}")
    yield c
    c.shutdown()  # type: ignore[no-untyped-call]
    for run in RUNS:  # the nodes' shard journals (one machine here: this one's temp dir)
        shutil.rmtree(journal_dir() / run, ignore_errors=True)


RUNS: list[str] = []
"""Run directories' names whose shards journaled on the nodes."""


def _ray_args(sim: Any, out: Path, c: Cluster, *extra: str) -> list[str]:
    return run_args(sim, out, "--ray", c.address, *extra)


def test_two_shards_on_two_nodes_merge_into_one_verified_record(sim, cluster, tmp_path):
    out = tmp_path / "runs"
    args = _ray_args(sim, out, cluster, "--shards", "2", "--concurrency", "8", "--duration", "3")
    rc, text = run_soaktop(*args, "--max-tokens", "16", timeout=150)
    run_dir = only_run_dir(out)
    RUNS.append(run_dir.name)
    rec = record(run_dir)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert rec["status"] == "PASSED" or codes <= LAG_ONLY, (rec["reasons"], text[-3000:])
    assert rc == (0 if rec["status"] == "PASSED" else 3), text[-3000:]
    shards = rec["shards"]
    assert len({s["node_id"] for s in shards}) == 2, shards  # one node each
    assert all(s["host"] == "127.0.0.1" and s["status"] == "done" for s in shards), shards
    load = rec["load"]
    assert sum(s["requests"] for s in shards) == load["completed"] + load["failed"] > 16
    for s in shards:
        # The node's journal is what the coordinator received, line for line.
        assert s["journal_sha256"] == s["received_sha256"] and len(s["journal_sha256"]) == 64
        assert s["journal_lines"] == s["received_lines"] > s["requests"]
        on_node = Path(s["journal_path"])
        assert on_node == journal_dir() / run_dir.name / f"shard-{s['index']}.jsonl"
        assert hashlib.sha256(on_node.read_bytes()).hexdigest() == s["journal_sha256"]
        # One machine, one monotonic clock: the measured offset is within its uncertainty
        # (and a loopback round trip is well under 50 ms).
        for when in ("", "_end"):
            off, unc = s[f"clock_offset{when}_ns"], s[f"clock_uncertainty{when}_ns"]
            assert 0 <= unc < 50_000_000 and abs(off) <= unc + 1_000_000, s
        assert abs(s["release_offset_s"]) < 0.5, s
    lines = [line for line in journal(run_dir) if line["phase"] == "load"]
    assert {line["shard"] for line in lines} == {0, 1}
    assert run_soaktop("verify", str(run_dir))[0] == 0


def _node_of(pid: int, c: Cluster) -> Any:
    """The cluster node whose raylet is an ancestor of process ``pid``."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in c.worker_nodes}
    for parent in psutil.Process(pid).parents():
        if parent.pid in raylets:
            return raylets[parent.pid]
    raise AssertionError(f"process {pid} is on no worker node")


def _started(run_dir: Path, count: int, timeout: float = 60) -> dict[int, int]:
    """shard index -> its process id on its node, once ``count`` shards have started
    and the load has begun."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = journal(run_dir, "events.jsonl") if (run_dir / "events.jsonl").exists() else []
        started = {e["data"]["shard"]: e["data"]["pid"] for e in events
                   if e["kind"] == "shard" and "pid" in e["data"]}  # fmt: skip
        loading = any(e["kind"] == "phase" and e["data"].get("phase") == "load" for e in events)
        if len(started) == count and loading:
            return started
        time.sleep(0.1)
    raise AssertionError("the shards never started their load")


def test_a_removed_node_names_the_lost_shard(sim, cluster, tmp_path):
    out = tmp_path / "runs"
    args = _ray_args(sim, out, cluster, "--shards", "2", "--concurrency", "8", "--duration", "8")
    p = soaktop(*args, "--max-tokens", "64")
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        run_dir = only_run_dir(out)
        RUNS.append(run_dir.name)
        pids = _started(run_dir, 2)
        time.sleep(1.0)
        victim = _node_of(pids[1], cluster)
        t_kill = time.monotonic()
        cluster.remove_node(victim, allow_graceful=False)
        text, _ = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
        if len(cluster.worker_nodes) < 2:  # the other tests need two shard nodes again
            cluster.add_node(**NODE, resources={"soaktop_shard": 1})
            cluster.wait_for_nodes()
    print(f"lost node to record: {time.monotonic() - t_kill:.1f} s")
    assert p.returncode == 3, text[-3000:]
    rec = record(run_dir)
    assert rec["status"] == "INVALID"
    lost = [r for r in rec["reasons"] if r["code"] == "shard_lost"]
    assert len(lost) == 1 and "shard 1 (the 2nd of 2) lost" in lost[0]["message"], lost
    assert "was lost" in lost[0]["message"], lost  # its host, by address and node
    gone, other = rec["shards"][1], rec["shards"][0]
    assert gone["status"] == "lost" and gone["lost_at_s"] is not None
    # Named within seconds of the node's removal (the run's own window was 8 s).
    assert other["status"] == "done" and other["requests"] > 0
    assert not any(line["cancelled"] for line in journal(run_dir) if line["shard"] == 0)
    assert run_soaktop("verify", str(run_dir))[0] == 0
    assert not _still_running(pids.values()), "a shard outlived its run (or its node)"


def test_a_coordinator_killed_mid_load_leaves_no_shard_running(sim, cluster, tmp_path):
    out = tmp_path / "runs"
    args = _ray_args(sim, out, cluster, "--shards", "2", "--concurrency", "4", "--duration", "60")
    p = soaktop(*args, "--max-tokens", "64")
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        run_dir = only_run_dir(out)
        RUNS.append(run_dir.name)
        pids = _started(run_dir, 2)
        coordinator = int((run_dir / "runner.pid").read_text())  # the runner, not the CLI
        os.kill(coordinator, signal.SIGKILL)  # no goodbye to anyone
        p.communicate(timeout=30)
        left = _still_running(pids.values(), timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    # The node's own watch (no poll for 15 s: end of stdin, then a kill) ends them.
    assert not left, f"shard processes {left} outlived their coordinator"


def test_more_shards_than_shard_nodes_is_refused_before_any_load(sim, cluster, tmp_path):
    out = tmp_path / "runs"
    args = _ray_args(sim, out, cluster, "--shards", "3", "--concurrency", "6", "--duration", "3")
    t0 = time.monotonic()
    rc, text = run_soaktop(*args, timeout=120)
    took = time.monotonic() - t0
    assert rc == 1, text[-3000:]
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rec["status"] == "FAILED"
    words = " ".join(r["message"] for r in rec["reasons"])
    assert (
        f"--ray {cluster.address} --shards 3: the cluster has 2 nodes offering soaktop_shard"
        in words
    ), words
    assert "a sharded run needs one node per shard" in words
    assert rec["load"] is None
    assert not (run_dir / "requests.jsonl").exists() or not journal(run_dir)
    assert took < 60, took


def _listening(c: Cluster, *roots: int) -> list[tuple[str, Any]]:
    """Every listening socket of the cluster's processes, of ``roots`` (a coordinator)
    and of all their descendants (workers, actors, shards)."""
    nodes = [c.head_node, *c.worker_nodes]
    pids = {info.process.pid for n in nodes for procs in n.all_processes.values() for info in procs}
    procs = [psutil.Process(pid) for pid in {*pids, *roots} if psutil.pid_exists(pid)]
    procs += [child for p in list(procs) for child in p.children(recursive=True)]
    listening = []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except psutil.Error:
            continue
        listening += [(name, c.laddr) for c in conns if c.status == psutil.CONN_LISTEN]
    return listening


def _beyond_loopback(listening: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    assert listening, "no listening socket found: the check looked at nothing"
    loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
    return [(name, addr) for name, addr in listening if addr.ip not in loopback]


def _still_running(pids: Any, timeout: float = 30) -> list[int]:
    """Of ``pids`` (shard processes), those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if psutil.pid_exists(pid) and
                 psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        time.sleep(0.2)
    return alive


def test_no_process_of_the_cluster_listens_beyond_loopback(cluster):
    assert not _beyond_loopback(_listening(cluster))


SECRET = "sk-raytest-9c1d4e7f2a6b"
"""An API key no file of the run, no node's journal or Ray log, and no shard's argv or
environment may hold."""


def test_the_api_key_reaches_the_shards_over_the_control_plane_only(
    sim, cluster, tmp_path, monkeypatch
):
    monkeypatch.setenv("SOAK_RAY_TEST_KEY", SECRET)  # the runner's; the nodes never had it
    out = tmp_path / "runs"
    flags = ("--shards", "2", "--concurrency", "4", "--duration", "3", "--max-tokens", "8")
    p = soaktop(*_ray_args(sim, out, cluster, *flags, "--api-key-env", "SOAK_RAY_TEST_KEY"))
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.1)
        run_dir = only_run_dir(out)
        RUNS.append(run_dir.name)
        pids = _started(run_dir, 2)
        procs = [psutil.Process(pid) for pid in pids.values()]
        seen = [(proc.cmdline(), proc.environ()) for proc in procs]
        # Live: the coordinator (a Ray driver), its node's workers, the actors, the shards.
        beyond = _beyond_loopback(_listening(cluster, p.pid))
        text, _ = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode in (0, 3), text[-3000:]
    assert not beyond, beyond
    assert not _still_running(pids.values()), "a shard outlived its run"
    for argv, env in seen:
        assert argv[-2:] == ["-m", "soak.run.shard_main"], argv  # the ordinary shard
        assert not any(SECRET in a for a in argv), argv
        assert not any(SECRET in v for v in env.values()), "a shard's environment holds the key"
    assert record(run_dir)["shards"], text[-3000:]
    session = Path(cluster.head_node.get_session_dir_path())
    places = [run_dir, journal_dir() / run_dir.name, session]
    for path in (f for place in places for f in place.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 << 20:
            with contextlib.suppress(OSError):  # a socket or a file gone meanwhile
                assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in text


def test_an_address_with_no_cluster_is_refused_in_words_before_any_load(sim, tmp_path):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "runs"
    flags = ("--ray", f"127.0.0.1:{port}", "--shards", "2", "--concurrency", "4")
    t0 = time.monotonic()
    rc, text = run_soaktop(*run_args(sim, out, *flags, "--duration", "3"), timeout=120)
    took = time.monotonic() - t0
    assert rc == 1, text[-3000:]
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    words = " ".join(r["message"] for r in rec["reasons"])
    assert f"--ray 127.0.0.1:{port}: cannot connect to a Ray cluster there" in words, words
    assert rec["status"] == "FAILED" and rec["load"] is None
    assert not (run_dir / "requests.jsonl").exists() or not journal(run_dir)
    assert took < 60, took  # bounded: Ray alone would retry for minutes
