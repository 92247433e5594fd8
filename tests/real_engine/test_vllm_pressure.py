"""A real vLLM under pressure: queueing and KV-cache preemption, seen from both sides.

Each scenario starts its own server with the flags that make the engine's state visible
(REAL_VLLM_CPU.md): a small batch limit makes requests wait; a tiny KV cache makes running
requests get preempted. The record must hold both sides: the client's concurrency and
exact latencies, and the engine's sampled occupancy, preemptions and its own histogram
estimates. Assertions are on structure, counts and metric peaks, never on latency values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import assert_healthy_soak_verdict, soak_args
from tests.real_engine.vllm_server import vllm_server

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

SERVER_METHOD = "server histogram estimate (bucket interpolation)"
SERVER_LATENCIES = ("server_ttft_s", "server_e2e_s", "server_queue_s")


@dataclass
class Soak:
    """One finished soak against its own server."""

    rc: int
    output: str
    rec: dict[str, Any]
    lines: list[dict[str, Any]]
    wall_s: float

    def check_verdict(self) -> None:
        try:
            assert_healthy_soak_verdict(self.rc, self.rec, self.lines)
        except AssertionError as e:
            raise AssertionError(
                f"{e}\nexit {self.rc}: {self.rec['reasons']}\n{self.output[-3000:]}"
            ) from None


def soak_against(tmp: Path, server_args: list[str], *run_args: str) -> Soak:
    """Start a server with ``server_args``, run one headless soak against it, stop it.

    Without contract gates: the scenario is the engine's state under load, and gates
    (tested elsewhere) would only add time and a second reason to fail.
    """
    t0 = time.monotonic()
    out = tmp / "runs"
    with vllm_server(tmp, server_args) as srv:
        rc, text = run_soaktop(*soak_args(srv, out, "--no-gates", *run_args), timeout=300)
        assert srv.alive(), f"vLLM died under pressure; see {srv.log_path}"
    run_dir = only_run_dir(out)
    return Soak(rc, text, record(run_dir), journal(run_dir), time.monotonic() - t0)


def assert_server_latencies(engine: dict[str, Any]) -> None:
    """The three server histograms are in the record, labelled as estimates."""
    for key in SERVER_LATENCIES:
        est = engine[key]
        assert est is not None, (key, engine)
        assert est["method"] == SERVER_METHOD and est["n"] > 0, (key, est)
        assert {"p50", "p90", "p99", "mean"} <= set(est), (key, est)
        assert all(est[q] is not None for q in ("p50", "p90", "p99", "mean")), (key, est)


# --- queueing: the client holds 32 streams, the engine runs 8 and queues the rest ----------

QUEUE_WORKERS = 32
QUEUE_MAX_SEQS = 8


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Soak]:
    soak = soak_against(
        tmp_path_factory.mktemp("queued"),
        ["--max-num-seqs", str(QUEUE_MAX_SEQS)],
        "--concurrency",
        str(QUEUE_WORKERS),
        "--duration",
        "20",
        "--max-tokens",
        "64",
        "--ignore-eos",
    )
    print(f"queueing soak: {soak.wall_s:.1f} s with the server start")
    yield soak


def test_client_concurrency_is_not_engine_occupancy(queued):
    queued.check_verdict()
    load = queued.rec["load"]
    engine = queued.rec["telemetry"]["engines"][0]
    print({k: engine[k] for k in ("running_max", "waiting_max", "kv_usage_max", "preemptions")})
    assert load["workers_started"] == load["requested_concurrency"] == QUEUE_WORKERS
    assert load["barrier_released"] is True and load["completed"] > 0
    # Two different numbers, both recorded: 32 client streams, at most 8 running on the
    # engine, the rest waiting in its queue.
    assert engine["engine"] == "vllm" and engine["scrapes"] > engine["scrape_errors"]
    assert 0 < engine["running_max"] <= QUEUE_MAX_SEQS, engine
    assert engine["waiting_max"] > 0, engine
    assert engine["preemptions"] == 0, engine  # queued, not preempted: the KV cache is ample
    # The server saw the queue too: its queue-time histogram covers the load's requests.
    assert_server_latencies(engine)
    assert engine["server_queue_s"]["n"] == engine["server_e2e_s"]["n"]


def test_record_holds_client_and_server_ttft(queued):
    """Client TTFT (exact, nearest-rank, from the journal) and server TTFT (vLLM's
    histogram, estimated) side by side: different clocks, both labelled."""
    load = queued.rec["load"]
    engine = queued.rec["telemetry"]["engines"][0]
    client = load["ttft_s"]
    assert client["method"] == "nearest-rank" and client["n"] == load["completed"] > 0, client
    assert client["p50"] is not None and client["max"] is not None
    server = engine["server_ttft_s"]
    assert server["method"] == SERVER_METHOD and server["n"] > 0, server
    # The server counts a TTFT for every request whose first token fell in the window
    # (barrier release → end of drain): the completed ones, give or take requests in
    # flight at the boundaries (at most one per worker).
    assert abs(server["n"] - load["completed"]) <= QUEUE_WORKERS, (server, load["completed"])
    assert engine["server_e2e_s"]["n"] <= load["issued"]
    assert engine["window_s"][0] < engine["window_s"][1]
    print(f"client ttft {client}\nserver ttft {server}")


# --- KV pressure: a cache too small for the batch, so running requests get preempted ------

KV_BLOCKS = 24
KV_WORKERS = 16
KV_MAX_TOKENS = 512


def test_kv_cache_pressure_preempts(tmp_path):
    soak = soak_against(
        tmp_path,
        ["--max-num-seqs", str(KV_WORKERS), "--num-gpu-blocks-override", str(KV_BLOCKS)],
        "--concurrency",
        str(KV_WORKERS),
        "--duration",
        "15",
        "--max-requests",
        "40",
        "--max-tokens",
        str(KV_MAX_TOKENS),
        "--ignore-eos",
    )
    rec, load = soak.rec, soak.rec["load"]
    engine = rec["telemetry"]["engines"][0]
    ep = rec["identity"]["endpoints"][0]
    print(
        f"kv soak: {soak.wall_s:.1f} s with the server start; block_size "
        f"{ep['cache_config'].get('block_size')}, slots {ep['token_slots']}; "
        f"completed {load['completed']}; "
        + str({k: engine[k] for k in ("running_max", "waiting_max", "kv_usage_max")})
        + f" preemptions {engine['preemptions']}; reconciliation {rec['reconciliation']}"
    )
    soak.check_verdict()
    assert load["failed"] == 0 and load["completed"] > 0
    assert load["workers_started"] == KV_WORKERS and load["barrier_released"] is True
    ok = [r for r in soak.lines if r["ok"]]
    assert all(r["output_tokens"] == KV_MAX_TOKENS for r in ok)
    # The override took: the cache holds KV_BLOCKS blocks of the engine's block size
    # (128 tokens on the CPU backend), far less than 16 × (prompt + 512) tokens.
    block = int(ep["cache_config"]["block_size"])
    assert int(ep["cache_config"]["num_gpu_blocks"]) == KV_BLOCKS
    assert ep["token_slots"] == KV_BLOCKS * block
    assert ep["token_slots"] < KV_WORKERS * KV_MAX_TOKENS
    # The engine ran out of cache and preempted running requests during the load.
    assert engine["kv_usage_max"] >= 0.8, engine
    assert engine["preemptions"] > 0, engine
    assert_server_latencies(engine)
