"""Capture what a real llama-server sends, for the fixtures and for test_llamacpp_facts.

    .venv/bin/python -m tests.real_engine.llama_capture      # rewrite the llama.cpp fixtures

Starts the tier's server (``LLAMA_ARGS``), sends one streamed chat with usage, then reads
``/metrics``, ``/props`` and ``/slots``. The fixtures are the server's bytes as sent (a
local server: nothing secret in them), with a ``#`` header naming the build for the
metrics page, and ``/props`` less its chat template (the tiny model's, long, not a fact
any mapping reads).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.real_engine.llama_server import LlamaServer, llama_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
METRICS_FIXTURE = FIXTURES / "llamacpp_metrics.txt"
PROPS_FIXTURE = FIXTURES / "recipe_llamacpp_props.json"
SSE_FIXTURE = FIXTURES / "llamacpp_chat_stream.txt"


def stream_chat(srv: LlamaServer, max_tokens: int = 8) -> bytes:
    """One streamed chat completion with ``include_usage``: the raw SSE body."""
    body = {
        "model": srv.model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        r = c.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        return r.content


def capture(srv: LlamaServer) -> dict[str, Any]:
    """The streamed chat, then /metrics, /props, /slots as the server sent them."""
    sse = stream_chat(srv)
    out: dict[str, Any] = {"sse": sse}
    for path in ("/metrics", "/props", "/slots", "/v1/models", "/health"):
        out[path] = srv.get(path)
    return out


def write_fixtures(got: dict[str, Any]) -> None:
    """Rewrite the llama.cpp fixtures from one capture."""
    props = json.loads(got["/props"][1])
    build = props.get("build_info", "?")
    header = (
        f"# Captured from a real llama-server ({build}; llama-cpp-python 0.3.36's vendored\n"
        "# llama.cpp, CPU) with --metrics -np 2, after one streamed chat: see\n"
        "# tests/real_engine/llama_capture.py. The server writes every metric unlabelled.\n"
    )
    METRICS_FIXTURE.write_text(header + got["/metrics"][1].decode())
    props["chat_template"] = "(the tiny model's template, left out of the fixture)"
    PROPS_FIXTURE.write_text(json.dumps(props, indent=1, sort_keys=True) + "\n")
    SSE_FIXTURE.write_bytes(got["sse"])


def main() -> int:
    with (
        tempfile.TemporaryDirectory() as d,
        llama_server(Path(d), ["-np", "2", "-c", "4096"]) as srv,
    ):
        write_fixtures(capture(srv))
    print(METRICS_FIXTURE, PROPS_FIXTURE, SSE_FIXTURE, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
