"""Fixtures of the real-engine tier: a real vLLM 0.32 on the CPU, soaktop as a real CLI.

Server starts are the tier's main cost (~25-35 s each on 2 cores), so tests share one
session-scoped server where the flags allow; a test that needs other flags, or that kills
the engine, starts its own. Assertions are on structure and counts, never on latency.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.real_engine.llama_server import LlamaServer, llama_server, missing
from tests.real_engine.vllm_server import VllmServer, vllm_server

REQUEST_TIMEOUT_S = 60.0
"""Client timeout for requests a test sends itself (latency swings widely on 2 cores)."""

# vLLM 0.32 with --enable-log-requests, one line per request at INFO:
#   (APIServer pid=N) INFO ... [request_logger.py:65] Received request chatcmpl-<X-Request-Id>:
#   params: SamplingParams(n=1, ..., seed=None, ..., ignore_eos=True, max_tokens=64, ...),
#   lora_request: None.
RECEIVED = re.compile(
    r"Received request (?:chatcmpl-|cmpl-)(\S+): params: SamplingParams\((.*?)\),"
)


@pytest.fixture(scope="session")
def vllm_logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The shared server, default flags plus ``--enable-log-requests``."""
    with vllm_server(tmp_path_factory.mktemp("vllm-logged"), ["--enable-log-requests"]) as srv:
        yield srv


def soak_args(srv: VllmServer | LlamaServer, out: Path, *extra: str) -> list[str]:
    """``soaktop run`` against ``srv``, headless, into ``out``.

    Without ``--gates``/``--suite`` in ``extra`` the run has no contract gates (the load
    tests stay short; test_vllm_gates names its suites).
    """
    gates = [] if {"--gates", "--suite", "--no-gates"} & set(extra) else ["--no-gates"]
    return [
        "run",
        "--endpoint",
        srv.url,
        "--model",
        srv.model,
        "--headless",
        "--interval",
        "5",
        "--out",
        str(out),
        *gates,
        *extra,
    ]


def logged_requests(log_text: str) -> dict[str, dict[str, str]]:
    """Request id (the client's X-Request-Id) → its logged SamplingParams fields."""
    out: dict[str, dict[str, str]] = {}
    for m in RECEIVED.finditer(log_text):
        params = dict(kv.split("=", 1) for kv in m.group(2).split(", ") if "=" in kv)
        out[m.group(1)] = params
    return out


def assert_reasons_match_journal(rec: dict[str, Any], lines: list[dict[str, Any]]) -> None:
    """The record's reasons and counters say what the journal says."""
    load = rec["load"]
    failed = [r for r in lines if not r["ok"] and not r["cancelled"]]
    by_class: dict[str, int] = {}
    for r in failed:
        by_class[r["failure"]] = by_class.get(r["failure"], 0) + 1
    assert load["failed"] == len(failed)
    assert load["failures_by_class"] == by_class
    assert load["completed"] == sum(1 for r in lines if r["ok"])
    assert load["issued"] == len(lines)
    codes = {r["code"] for r in rec["reasons"]}
    assert ("load_failures" in codes) == (len(failed) > 0), rec["reasons"]
    if failed:
        msg = next(r["message"] for r in rec["reasons"] if r["code"] == "load_failures")
        assert msg.startswith(f"{len(failed)} of {len(lines)} load requests failed"), msg
        for cls, n in by_class.items():
            assert f"{n} {cls}" in msg, msg
    assert rec["status"] != "PASSED" or all(r["effect"] == "note" for r in rec["reasons"])


EXIT = {"PASSED": 0, "FAILED": 1, "INVALID": 3, "ABORTED": 4}


def assert_healthy_soak_verdict(rc: int, rec: dict[str, Any], lines: list[dict[str, Any]]) -> None:
    """A soak of a healthy server PASSES, or else its record says why, consistently.

    The one accepted non-pass: INVALID for ``client_overloaded`` on a starved 2-core box
    (the client's loop lag, from ``client_health``, above the run's limit) with no failure.
    """
    assert_reasons_match_journal(rec, lines)
    assert rc == EXIT[rec["status"]], (rc, rec["status"])
    if rc == 0:
        return
    blocking = [r for r in rec["reasons"] if r["effect"] != "note"]
    assert [r["code"] for r in blocking] == ["client_overloaded"], rec["reasons"]
    lag = rec["client_health"]["loop_lag_p99_s"]
    assert lag > rec["config"]["max_loop_lag_s"], (lag, rec["config"]["max_loop_lag_s"])
    assert f"{lag * 1000:.0f} ms" in blocking[0]["message"], blocking[0]["message"]
    assert rec["load"]["failed"] == 0


def require_llama_server() -> None:
    """Skip a llama.cpp test, with the exact reason, when ``llama-server`` or the tiny GGUF
    is not built; on CI (``CI=true``) that is a failure: ``.ci/run`` builds both first, so a
    skip there would hide a broken build behind a green run."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and the llama.cpp tier cannot run: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def llama_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The shared llama-server: 2 slots, 2,048 tokens of context each (``-c`` is the total)."""
    require_llama_server()
    with llama_server(tmp_path_factory.mktemp("llama"), LLAMA_ARGS) as srv:
        yield srv


LLAMA_SLOTS = 2
LLAMA_ARGS = ["-np", str(LLAMA_SLOTS), "-c", str(2048 * LLAMA_SLOTS), "-t", "1", "-tb", "1"]
"""The tier's server flags: fewer slots than the soaks' concurrency, so requests queue.
One thread: with two, on 2 busy cores, ggml's threads wait on each other at every step
(300 ms per token of the tiny model, against under 1 ms with one)."""
