"""A short soak against a real llama.cpp ``llama-server``: what a user reads in the run dir.

The client holds 4 requests in flight against 2 slots (``-np 2``), so llama.cpp defers
the others: the record must show that queueing and the occupancy from the server's own
``/metrics`` (``llamacpp:requests_processing`` / ``requests_deferred``), which this test
checks against ``/slots``, polled beside the soak. The token counters the record
reconciles are llama.cpp's own; llama-server counts no requests, and the record must say
so rather than claim a match.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop, soaktop
from tests.real_engine.conftest import (
    LLAMA_SLOTS,
    assert_healthy_soak_verdict,
    soak_args,
)
from tests.real_engine.llama_server import LlamaServer

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(300)]

MAX_TOKENS = 32
WORKERS = 4


def busy_slots(srv: LlamaServer) -> int:
    """Slots ``/slots`` says are processing a request now."""
    return sum(bool(s.get("is_processing")) for s in srv.get_json("/slots"))


def test_soak_queues_beyond_the_slots_and_reconciles(llama_shared, tmp_path):
    srv = llama_shared
    out = tmp_path / "runs"
    args = soak_args(
        srv,
        out,
        *("--concurrency", str(WORKERS), "--duration", "15"),
        *("--max-tokens", str(MAX_TOKENS), "--ignore-eos"),
    )
    p = soaktop(*args)
    seen: list[int] = []
    try:
        while p.poll() is None:  # the server's own view of its slots, during the soak
            seen.append(busy_slots(srv))
            time.sleep(0.25)
        text, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    rc = p.returncode
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    try:
        assert_healthy_soak_verdict(rc, rec, lines)
    except AssertionError as e:
        raise AssertionError(f"{e}\nexit {rc}: {rec['reasons']}\n{text[-3000:]}") from None

    load = rec["load"]
    assert load["workers_started"] == load["requested_concurrency"] == WORKERS
    ok = [r for r in lines if r["ok"]]
    assert load["completed"] == len(ok) > 0
    # ignore_eos reached llama.cpp: every answer ran to max_tokens
    assert {r["output_tokens"] for r in ok} == {MAX_TOKENS}
    assert all(r["finish"] == "length" for r in ok)

    ident = rec["identity"]
    assert ident["engine"] == "llamacpp" and ident["model_served"] is True, ident

    # Occupancy and queueing, from llama.cpp's /metrics as the record holds them
    engine = rec["telemetry"]["engines"][0]
    assert engine["engine"] == "llamacpp", engine
    assert engine["running_max"] == LLAMA_SLOTS, engine  # never more than -np
    assert engine["waiting_max"] >= 1, engine  # 4 in flight, 2 slots: deferred
    assert engine["kv_usage_max"] is None  # this build exports no KV gauge: unknown
    # ... and /slots agrees: never more than -np busy, all of them busy at some point
    assert max(seen) == LLAMA_SLOTS and all(n <= LLAMA_SLOTS for n in seen), seen

    # The server's token counters grew by exactly what the journal holds; requests are
    # not counted by llama-server, and the record says that instead of a match.
    recon = rec["reconciliation"]["load"]
    assert recon["generation_tokens"]["status"] == "matched", recon
    assert recon["generation_tokens"]["server"] == MAX_TOKENS * len(ok)
    assert recon["prompt_tokens"]["status"] == "matched", recon
    assert recon["prompt_tokens"]["server"] == load["prompt_tokens"]
    assert recon["requests"]["status"] == "unavailable", recon
    assert "exports no requests_finished_total" in recon["requests"]["why"]
    assert recon["matched"] is None, recon

    rc_v, out_v = run_soaktop("verify", str(run_dir))
    assert rc_v == 0, out_v
    print(json.dumps({"slots_seen_max": max(seen), "engine": engine}, default=str)[:600])
