"""A hostile OpenAI-compatible server, as a real process on loopback, for trust-boundary tests.

It speaks just enough of vLLM's surface for a soak to run (``/v1/models``, ``/version``,
``/metrics``, ``/health``, ``/tokenize``, ``/v1/chat/completions``, ``/v1/completions``) and
lets a test replace any answer with something an attacker or a broken engine would send:
terminal escapes in every string, empty or impossible streams, garbage or hanging
``/metrics``, an API key echoed back split across chunks, no keep-alive.

A *script* (a JSON-able dict) says what to change; everything it does not name behaves well:

``model``
    the served model id (default ``"hostile"``).
``routes``
    ``{path: response}`` for the GET routes and ``/tokenize``; ``response`` is a *spec*:
    ``{"status": 200, "json": {...}}`` or ``{"text": "..."}``, plus ``"hang_s": S`` (sleep
    before answering), ``"headers": {...}``, ``"close": true`` (no keep-alive).
``completion``
    the spec of every POST to a completions route, or ``{"sequence": [spec, ...]}`` cycled
    per request. A streamed spec has ``"stream": ["raw SSE text", ...]`` (each item one
    write, flushed; ``"chunk_delay_s"`` between writes) — the default is a short valid
    stream with usage; a non-streamed request (the gates) gets ``"json"``, default a
    chat completion whose content is ``"{}"``. ``"close": "silent"`` closes the connection
    after the response *without* a ``Connection: close`` header (a server or proxy with no
    keep-alive that does not say so); ``"close": "reused"`` answers the first request of
    every connection normally and drops any later request on it unanswered, before reading
    its body (the deterministic form of the same race: the client reuses a pooled
    connection the server has already given up on).

In any string of a spec, ``@@KEY[a:b]@@`` is replaced by ``key[a:b]`` of the request's
bearer token (so a test can make the server echo the API key split at any position) and
``@@MODEL@@`` by the model id.

Run it with :func:`hostile_server` (a context manager yielding the base URL); the process
binds 127.0.0.1 on a free port and dies with its parent's ``with`` block.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

ESC_TITLE = "\x1b]0;PWNED-TITLE\x07"
"""Sets the terminal's window title (OSC 0) — what an attacker would put in an error."""
ESC_CLEAR = "\x1b[2J"
"""Clears the screen (CSI 2 J)."""
HOSTILE = f"{ESC_TITLE}{ESC_CLEAR}\x9b31m=HYPERLINK(1)\x07"
"""Every kind of control at once: OSC, CSI, a C1 CSI, BEL and a spreadsheet formula."""

_KEY = re.compile(r"@@KEY\[(\d*):(\d*)\]@@")


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return "data: " + json.dumps(body, separators=(",", ":")) + "\n\n"


def good_stream(model: str = "@@MODEL@@", tokens: tuple[str, ...] = ("hi", " there")) -> list[str]:
    """A valid vLLM-shaped chat stream: role chunk, tokens, finish, usage, ``[DONE]``."""
    out = [_chunk(model, {"role": "assistant", "content": ""})]
    out += [_chunk(model, {"content": t}) for t in tokens]
    out.append(_chunk(model, {}, "stop"))
    usage = {"prompt_tokens": 5, "completion_tokens": len(tokens), "total_tokens": 5 + len(tokens)}
    out.append(
        "data: "
        + json.dumps(
            {
                "id": "chatcmpl-hostile",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": model,
                "choices": [],
                "usage": usage,
            },
            separators=(",", ":"),
        )
        + "\n\n"
    )
    out.append("data: [DONE]\n\n")
    return out


def _default_routes(model: str) -> dict[str, dict[str, Any]]:
    return {
        "/v1/models": {
            "json": {
                "object": "list",
                "data": [
                    {"id": model, "object": "model", "owned_by": "hostile", "max_model_len": 4096}
                ],
            }
        },
        "/version": {"json": {"version": "0.0.0-hostile"}},
        "/health": {"text": ""},
        "/metrics": {"text": "# no metrics\n"},
    }


def _default_completion(model: str) -> dict[str, Any]:
    return {
        "stream": good_stream(),
        "json": {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "{}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        },
    }


def _fill(value: Any, key: str, model: str) -> Any:
    """Substitute the ``@@KEY[a:b]@@`` and ``@@MODEL@@`` placeholders in every string."""
    if isinstance(value, str):
        value = value.replace("@@MODEL@@", model)
        return _KEY.sub(
            lambda m: key[int(m[1]) if m[1] else None : int(m[2]) if m[2] else None], value
        )
    if isinstance(value, list):
        return [_fill(v, key, model) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, key, model) for k, v in value.items()}
    return value


def build_app(script: dict[str, Any]) -> web.Application:
    """The aiohttp application that plays ``script`` (see the module doc)."""
    model = str(script.get("model", "hostile"))
    routes = _default_routes(model) | dict(script.get("routes", {}))
    completion = script.get("completion") or _default_completion(model)
    sequence = completion.get("sequence") or [completion]
    counter = {"n": 0}
    stats = {"completions": 0, "dropped": 0}
    used: set[object] = set()  # transports that already served a request ("close": "reused")

    def bearer(request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    async def answer(request: web.Request, spec: dict[str, Any]) -> web.StreamResponse:
        spec = _fill(spec, bearer(request), model)
        if spec.get("hang_s"):
            await asyncio.sleep(float(spec["hang_s"]))
        headers = dict(spec.get("headers", {}))
        status = int(spec.get("status", 200))
        if "json" in spec:
            resp: web.StreamResponse = web.json_response(
                spec["json"], status=status, headers=headers
            )
        else:
            resp = web.Response(text=str(spec.get("text", "")), status=status, headers=headers)
        if spec.get("close"):
            resp.force_close()
        return resp

    async def get_route(request: web.Request) -> web.StreamResponse:
        spec = routes.get(request.path)
        if spec is None:
            return web.json_response({"error": {"message": "not found"}}, status=404)
        return await answer(request, spec)

    async def post_completion(request: web.Request) -> web.StreamResponse:
        if sequence[counter["n"] % len(sequence)].get("close") == "reused":
            if request.transport in used:
                stats["dropped"] += 1
                request.transport.close()  # type: ignore[union-attr]
                return web.Response()  # never sent: the connection is closed (and no log)
            used.add(request.transport)
        body = await request.json()
        spec = _fill(sequence[counter["n"] % len(sequence)], bearer(request), model)
        counter["n"] += 1
        stats["completions"] += 1
        if not body.get("stream"):
            return await answer(
                request,
                {k: v for k, v in spec.items() if k != "stream"}
                | {"json": spec.get("json", _default_completion(model)["json"])},
            )
        if spec.get("hang_s"):
            await asyncio.sleep(float(spec["hang_s"]))
        status = int(spec.get("status", 200))
        if status != 200 or ("stream" not in spec and "json" in spec):
            return await answer(request, spec)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        if spec.get("close") is True:
            resp.force_close()
        await resp.prepare(request)
        delay = float(spec.get("chunk_delay_s", 0))
        for piece in spec.get("stream", good_stream(model)):
            await resp.write(piece.encode("utf-8", "surrogatepass"))
            if delay:
                await asyncio.sleep(delay)
        await resp.write_eof()
        if spec.get("close") == "silent" and request.transport is not None:
            request.transport.close()
        return resp

    async def post_tokenize(request: web.Request) -> web.StreamResponse:
        spec = routes.get(request.path)
        if spec is not None:
            return await answer(request, spec)
        body = await request.json()
        text = body.get("prompt") or " ".join(
            str(m.get("content", "")) for m in body.get("messages", [])
        )
        n = max(1, len(str(text).split()))  # one token a word: calibration converges
        return web.json_response({"count": n, "max_model_len": 4096, "tokens": [1] * n})

    async def get_stats(request: web.Request) -> web.StreamResponse:
        return web.json_response(stats)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", post_completion)
    app.router.add_post("/v1/completions", post_completion)
    app.router.add_post("/tokenize", post_tokenize)
    app.router.add_get("/_hostile/stats", get_stats)
    app.router.add_get("/{tail:.*}", get_route)
    return app


@contextlib.contextmanager
def hostile_server(script: dict[str, Any] | None = None, *, timeout_s: float = 20) -> Iterator[str]:
    """Run the hostile server in its own process on 127.0.0.1; yield its base URL."""
    with tempfile.TemporaryDirectory(prefix="soaktop-hostile-") as tmp:
        script_file = Path(tmp) / "script.json"
        ready_file = Path(tmp) / "ready"
        script_file.write_text(json.dumps(script or {}))
        # stderr to a file, never a pipe: a client that drops its streams makes aiohttp log
        # a traceback per request, and an unread pipe would fill and freeze the server.
        err_file = Path(tmp) / "stderr"
        with err_file.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.hostile_server", str(script_file), str(ready_file)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=Path(__file__).resolve().parent.parent,
            )
        try:
            deadline = time.monotonic() + timeout_s
            while not ready_file.exists() or not ready_file.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    text = err_file.read_text(errors="replace")
                    raise RuntimeError(f"hostile server did not start: {text[-2000:]}")
                time.sleep(0.02)
            yield ready_file.read_text().strip()
        finally:
            proc.kill()
            proc.wait(10)


async def _serve(script: dict[str, Any], ready_file: Path) -> None:
    runner = web.AppRunner(build_app(script), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(f"http://127.0.0.1:{port}\n")
    tmp.replace(ready_file)
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 — die with the test process, even after kill -9
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])))
