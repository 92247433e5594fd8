"""A real vLLM engine dies under a soak: the record must say FAILED, with classified failures.

The crash is real and deliberate: a burst of 64 concurrent requests that each carry a
``seed`` kills vLLM 0.32's CPU engine (``RuntimeError: CPU Generator does not use offset``);
in-flight requests get HTTP 500 and the API server exits. The trigger is a seeded request
whose prefill is split across steps (chunked prefill): the model runner then rewinds its
torch generator with ``set_offset``, which CPU generators do not have. So the burst's
prompts are long (64 × ~260 tokens against the CPU default of 2,048 batched tokens a step);
64 short seeded prompts fit in one step and the engine survives them. soaktop never sends
seeds itself (test_vllm_soak checks that); only this test does, once, with short timeouts.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time

import httpx
import pytest

from tests.e2e.conftest import journal, record, soaktop, wait_for_phase
from tests.real_engine.conftest import EXIT, assert_reasons_match_journal, soak_args
from tests.real_engine.vllm_server import VllmServer, vllm_server

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

BURST = 64
FATAL = re.compile(
    r"EngineCore encountered|died unexpectedly|RuntimeError: CPU Generator does not use offset"
)
DEATH_CLASSES = {"http_5xx", "connect_error", "stream_cut", "error_event"}


def long_prompt(i: int) -> str:
    """A distinct prompt of roughly 260 tokens (no shared prefix to cache)."""
    return f"{i} " + " ".join(f"value_{i}_{j} = {j * 7 + i}" for j in range(24))


async def seeded_burst(srv: VllmServer, n: int = BURST) -> collections.Counter[str]:
    """``n`` concurrent chat requests, each with its own seed: how each one ended."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, connect=5.0)
    async with httpx.AsyncClient(base_url=srv.url, limits=limits, timeout=timeout) as client:

        async def one(i: int) -> str:
            body = {
                "model": srv.model,
                "messages": [{"role": "user", "content": long_prompt(i)}],
                "max_tokens": 32,
                "seed": 1000 + i,
            }
            try:
                r = await client.post("/v1/chat/completions", json=body)
            except httpx.HTTPError as e:
                return type(e).__name__
            return f"HTTP {r.status_code}"

        return collections.Counter(await asyncio.gather(*(one(i) for i in range(n))))


def test_engine_death(tmp_path):
    out = tmp_path / "runs"
    with vllm_server(tmp_path) as srv:
        soak = soaktop(
            *soak_args(
                srv,
                out,
                "--concurrency",
                "8",
                "--duration",
                "30",
                "--max-tokens",
                "64",
                "--ignore-eos",
                "--server-log",
                str(srv.log_path),
            )
        )
        try:
            run_dir = wait_for_phase(out, "load", timeout=60)
            time.sleep(2)  # let the soak complete some requests first
            t0 = time.monotonic()
            burst = asyncio.run(seeded_burst(srv))
            exit_code = srv.wait_exit(60)
            died_s = time.monotonic() - t0
            print(f"burst: {dict(burst)}; server exit {exit_code} after {died_s:.1f} s")
            assert exit_code is not None, f"vLLM survived the seeded burst: {dict(burst)}"
            text, _ = soak.communicate(timeout=240)
        finally:
            if soak.poll() is None:
                soak.kill()
                soak.wait(10)
        log = srv.log_text()
    assert not srv.processes(), "vLLM processes outlived the dead server's teardown"

    fatal = [ln for ln in log.splitlines() if FATAL.search(ln)]
    assert fatal, f"no fatal engine line in {srv.log_path}"
    print("fatal lines:", *fatal[:3], sep="\n  ")

    rc = soak.returncode
    rec = record(run_dir)
    lines = journal(run_dir)
    load = rec["load"]
    print(
        f"soak exit {rc}: failures_by_class={load['failures_by_class']} "
        f"completed={load['completed']} issued={load['issued']}"
    )
    assert_reasons_match_journal(rec, lines)
    assert rec["status"] == "FAILED" and rc == EXIT["FAILED"], (rc, rec["reasons"], text[-2000:])
    assert rec["reasons"][0]["code"] == "load_failures", rec["reasons"]
    # soaktop saw it from the server's side too: the log's fatal lines as fault events and
    # /health going from ok to refused, on the same timeline as the failed requests
    events = journal(run_dir, "events.jsonl")
    faults = [e for e in events if e["kind"] == "fault"]
    kinds = {e["data"]["fault"] for e in faults}
    assert kinds & {"engine_dead", "engine_error"}, [e["message"] for e in faults]
    assert any(FATAL.search(e["data"]["line"]) for e in faults), faults
    health = [e for e in events if e["kind"] == "health"]
    assert health and "(was ok)" in health[0]["message"], health
    codes = {r["code"] for r in rec["reasons"]}
    assert {"server_fault", "health_outage"} <= codes, rec["reasons"]
    assert load["completed"] > 0  # the soak ran before the engine died
    by_class = load["failures_by_class"]
    assert by_class and set(by_class) <= DEATH_CLASSES, by_class
    failed = [r for r in lines if not r["ok"] and not r["cancelled"]]
    assert all(r["detail"] for r in failed)
    # What a user sees: the requests in flight when the engine died answer HTTP 500 or an
    # error event naming the engine; after the server exits, connections are refused.
    assert by_class.get("http_5xx", 0) + by_class.get("error_event", 0) > 0, by_class
    assert any("EngineCore encountered an issue" in r["detail"] for r in failed)
    assert by_class.get("connect_error", 0) > 0, by_class
    # Nothing sent after the server went away completed.
    gone_s = min(r["sent_s"] for r in failed if r["failure"] == "connect_error")
    assert max(r["sent_s"] for r in lines if r["ok"]) < gone_s
