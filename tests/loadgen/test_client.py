"""StreamClient against a tiny loopback aiohttp server: timings and failure classes."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import aiohttp.connector
import orjson
import pytest
from aiohttp import web
from multidict import CIMultiDict

from loadgen.client import StreamClient
from loadgen.envelope import FailureClass, RequestResult

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-test-1234567890abcdef"


def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ROLE = chunk({"role": "assistant", "content": ""})
USAGE = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}\n\n'
)
DONE = b"data: [DONE]\n\n"
VLLM_500 = {
    "error": {
        "message": "EngineCore encountered an issue. See stack trace for the root cause.",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
}


@dataclass
class Server:
    base: str
    seen: list[CIMultiDict[str]] = field(default_factory=list)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def sse(request: web.Request, parts: list[bytes], gap_s: float = 0.005) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
        await asyncio.sleep(gap_s)
    await resp.write_eof()
    return resp


def cut_hard(request: web.Request) -> None:
    """Reset the connection (RST, not FIN)."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    transport.abort()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    seen: list[CIMultiDict[str]] = []

    async def record(request: web.Request) -> None:
        seen.append(request.headers.copy())
        await request.read()

    async def models(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def ok(request: web.Request) -> web.StreamResponse:
        await record(request)
        tokens = [chunk({"content": t}) for t in ("Hel", "lo", "!")]
        return await sse(request, [ROLE, *tokens, chunk({}, "length"), USAGE, DONE])

    async def no_usage(request: web.Request) -> web.StreamResponse:
        await record(request)
        return await sse(request, [ROLE, chunk({"content": "a"}, "stop"), DONE])

    async def reasoning(request: web.Request) -> web.StreamResponse:
        await record(request)
        parts = [ROLE, chunk({"reasoning": "hmm"}), chunk({"reasoning": " ok"})]
        parts += [chunk({"content": "A"}), USAGE, DONE]
        return await sse(request, parts, gap_s=0.02)

    async def coalesced(request: web.Request) -> web.StreamResponse:
        await record(request)
        body = ROLE + chunk({"content": "a"}) * 3 + USAGE + DONE
        return await sse(request, [body])

    async def http500(request: web.Request) -> web.StreamResponse:
        await record(request)
        return web.json_response(VLLM_500, status=500)

    async def http404(request: web.Request) -> web.StreamResponse:
        await record(request)
        body = {"error": {"message": "The model `x` does not exist.", "type": "NotFoundError"}}
        return web.json_response(body, status=404)

    async def http400_flat(request: web.Request) -> web.StreamResponse:
        await record(request)
        body = {"object": "error", "message": "max_tokens too large", "code": 400}
        return web.json_response(body, status=400)

    async def echo_auth_401(request: web.Request) -> web.StreamResponse:
        await record(request)
        auth = request.headers.get("Authorization", "")
        msg = f"bad key {auth} (key {auth.split()[-1]})"
        return web.json_response({"error": {"message": msg}}, status=401)

    async def error_event(request: web.Request) -> web.StreamResponse:
        await record(request)
        err = b"data: " + orjson.dumps(VLLM_500) + b"\n\n"
        return await sse(request, [ROLE, chunk({"content": "a"}), err, DONE])

    async def reset_mid(request: web.Request) -> web.StreamResponse:
        await record(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(ROLE + chunk({"content": "a"}))
        await asyncio.sleep(0.05)
        cut_hard(request)
        return resp

    async def eof_mid(request: web.Request) -> web.StreamResponse:
        await record(request)
        return await sse(request, [ROLE, chunk({"content": "a"})])  # clean end, no [DONE]

    async def reset_before(request: web.Request) -> web.StreamResponse:
        await record(request)
        cut_hard(request)
        await asyncio.sleep(0.1)
        return web.Response()

    async def stall(request: web.Request) -> web.StreamResponse:
        await record(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(ROLE + chunk({"content": "a"}))
        await asyncio.sleep(5)
        return resp

    async def slow_headers(request: web.Request) -> web.StreamResponse:
        await record(request)
        await asyncio.sleep(5)
        return await sse(request, [ROLE, DONE])

    async def not_sse(request: web.Request) -> web.StreamResponse:
        await record(request)
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})

    async def garbage(request: web.Request) -> web.StreamResponse:
        await record(request)
        return await sse(request, [ROLE, b"data: {not json}\n\n", DONE])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    for path, handler in {
        "/ok": ok,
        "/no_usage": no_usage,
        "/reasoning": reasoning,
        "/coalesced": coalesced,
        "/500": http500,
        "/404": http404,
        "/400_flat": http400_flat,
        "/401": echo_auth_401,
        "/error_event": error_event,
        "/reset_mid": reset_mid,
        "/eof_mid": eof_mid,
        "/reset_before": reset_before,
        "/stall": stall,
        "/slow_headers": slow_headers,
        "/not_sse": not_sse,
        "/garbage": garbage,
    }.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Server(base=f"http://127.0.0.1:{port}", seen=seen)
    finally:
        await runner.cleanup()


BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})


async def go(client: StreamClient, url: str, request_id: str = "run/load/chat/0") -> RequestResult:
    return await client.stream(url, BODY, request_id=request_id, worker=3, prompt_id=7)


@pytest.fixture
async def client() -> AsyncIterator[StreamClient]:
    async with StreamClient(max_connections=8, headers={"Authorization": f"Bearer {SECRET}"}) as c:
        yield c


async def test_success_with_usage_and_timings(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/ok", request_id="run1/load/chat/42")
    assert r.ok, r
    assert (r.request_id, r.worker, r.prompt_id) == ("run1/load/chat/42", 3, 7)
    assert r.status == 200 and r.failure is None
    assert (r.prompt_tokens, r.output_tokens, r.finish_reason) == (12, 3, "length")
    assert r.chunks == 3 and len(r.itl_ns) == 2
    assert r.first_byte_ns is not None and r.first_token_ns is not None
    assert r.first_content_ns == r.first_token_ns
    assert r.end_ns is not None
    assert r.sent_ns <= r.first_byte_ns <= r.first_token_ns <= r.end_ns
    assert all(gap > 0 for gap in r.itl_ns)
    headers = server.seen[-1]
    assert headers["X-Request-Id"] == "run1/load/chat/42"
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(client)


async def test_connection_is_reused(server: Server, client: StreamClient) -> None:
    for i in range(5):
        assert (await go(client, server.base + "/ok", request_id=f"r/{i}")).ok
    connector = client.session.connector
    assert connector is not None
    assert sum(len(v) for v in connector._conns.values()) == 1  # one idle keep-alive conn


async def test_reasoning_then_content(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/reasoning")
    assert r.ok and r.chunks == 3
    assert r.first_token_ns is not None and r.first_content_ns is not None
    assert r.first_content_ns - r.first_token_ns >= 30_000_000  # two 20 ms gaps later


async def test_coalesced_events_share_a_read(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/coalesced")
    assert r.ok and r.chunks == 3
    assert len(r.itl_ns) == 2 and r.itl_ns == [0, 0]


async def test_missing_usage_is_none(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/no_usage")
    assert r.ok and r.chunks == 1 and r.itl_ns == []
    assert r.prompt_tokens is None and r.output_tokens is None
    assert r.finish_reason == "stop"


async def test_http_500_with_vllm_message(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/500")
    assert not r.ok
    assert (r.status, r.failure) == (500, FailureClass.HTTP_5XX)
    assert r.failure_detail is not None
    assert "EngineCore encountered an issue" in r.failure_detail
    assert r.first_token_ns is None and r.end_ns is None


async def test_http_404_and_flat_400(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/404")
    assert (r.status, r.failure) == (404, FailureClass.HTTP_4XX)
    assert r.failure_detail is not None and "does not exist" in r.failure_detail
    r = await go(client, server.base + "/400_flat")
    assert (r.status, r.failure) == (400, FailureClass.HTTP_4XX)
    assert r.failure_detail is not None and "max_tokens too large" in r.failure_detail
    r = await go(client, server.base + "/no_such_path")
    assert (r.status, r.failure) == (404, FailureClass.HTTP_4XX)


async def test_authorization_never_in_detail(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/401")
    assert r.failure is FailureClass.HTTP_4XX
    assert r.failure_detail is not None and "bad key" in r.failure_detail
    assert SECRET not in r.failure_detail


async def test_error_event_in_200_stream(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/error_event")
    assert not r.ok
    assert (r.status, r.failure) == (200, FailureClass.ERROR_EVENT)
    assert r.failure_detail is not None and "EngineCore" in r.failure_detail
    assert r.chunks == 1 and r.end_ns is None


async def test_reset_mid_stream_is_stream_cut(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/reset_mid")
    assert (r.status, r.failure) == (200, FailureClass.STREAM_CUT), r.failure_detail
    assert r.chunks == 1 and r.first_token_ns is not None and r.end_ns is None


async def test_clean_eof_without_done_is_stream_cut(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/eof_mid")
    assert (r.status, r.failure) == (200, FailureClass.STREAM_CUT)
    assert r.failure_detail is not None and "[DONE]" in r.failure_detail


async def test_reset_before_response_is_connect_error(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/reset_before")
    assert r.status is None and r.failure is FailureClass.CONNECT, r.failure_detail


async def test_stall_is_read_timeout(server: Server) -> None:
    async with StreamClient(max_connections=2, read_timeout_s=0.3) as c:
        r = await go(c, server.base + "/stall")
    assert (r.status, r.failure) == (200, FailureClass.READ_TIMEOUT), r.failure_detail
    assert r.chunks == 1


async def test_no_headers_is_read_timeout(server: Server) -> None:
    async with StreamClient(max_connections=2, read_timeout_s=0.3) as c:
        r = await go(c, server.base + "/slow_headers")
    assert r.status is None and r.failure is FailureClass.READ_TIMEOUT, r.failure_detail


async def test_stream_state_is_released(server: Server, client: StreamClient) -> None:
    results = await asyncio.gather(*(go(client, server.base + "/ok") for _ in range(4)))
    assert all(r.ok for r in results)
    assert not client._watched  # the watchdog holds nothing after the streams
    connector = client.session.connector
    assert connector is not None
    assert sum(len(v) for v in connector._conns.values()) >= 1
    for conns in connector._conns.values():
        for proto, _ in conns:
            assert proto.transport is not None
            assert getattr(proto.transport, "max_size", 0) <= 64 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_refused_port_is_connect_error() -> None:
    async with StreamClient(max_connections=2, connect_timeout_s=2) as c:
        r = await go(c, f"http://127.0.0.1:{free_port()}/v1/chat/completions")
        assert r.status is None and r.failure is FailureClass.CONNECT
        assert r.first_byte_ns is None
        with pytest.raises(ConnectionError):
            await c.warm_connection(f"http://127.0.0.1:{free_port()}/v1/models")


async def test_not_sse_and_garbage_are_malformed(server: Server, client: StreamClient) -> None:
    r = await go(client, server.base + "/not_sse")
    assert (r.status, r.failure) == (200, FailureClass.MALFORMED)
    assert r.failure_detail is not None and "application/json" in r.failure_detail
    r = await go(client, server.base + "/garbage")
    assert r.failure is FailureClass.MALFORMED
    assert r.failure_detail is not None and "{not json}" in r.failure_detail


async def test_warm_connection(server: Server, client: StreamClient) -> None:
    await client.warm_connection(server.base + "/v1/models")
    with pytest.raises(ConnectionError, match="HTTP 404"):
        await client.warm_connection(server.base + "/nope")


async def test_cancel_propagates_and_marks_result(server: Server, client: StreamClient) -> None:
    result = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0)
    task = asyncio.create_task(client.stream_into(result, server.base + "/stall", BODY))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if result.first_token_ns is not None:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert result.cancelled and result.first_token_ns is not None and result.failure is None


async def test_client_error_for_bad_url(client: StreamClient) -> None:
    r = await go(client, "notaurl")
    assert r.failure is FailureClass.CLIENT


async def test_not_started_is_client_error() -> None:
    r = await go(StreamClient(max_connections=1), "http://127.0.0.1:1/x")
    assert r.failure is FailureClass.CLIENT
    assert r.failure_detail is not None and "RuntimeError" in r.failure_detail


# -- the client's own resource exhaustion is never the server's connect_error -------------


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EMFILE, "client-side: too many open files (EMFILE)"),
        (errno.ENFILE, "client-side: too many open files in the system (ENFILE)"),
        (errno.ENOBUFS, "client-side: no buffer space (ENOBUFS)"),
        (errno.ENOMEM, "client-side: out of memory (ENOMEM)"),
    ],
)
async def test_fd_exhaustion_while_connecting_is_client_error(
    monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    async def no_socket(*_a: object, **_k: object) -> socket.socket:
        raise OSError(code, os.strerror(code))  # what socket() says under `ulimit -n`

    # aiohttp.connector's own reference to aiohappyeyeballs, patched where the connector looks
    monkeypatch.setattr(aiohttp.connector.aiohappyeyeballs, "start_connection", no_socket)  # type: ignore[attr-defined]
    async with StreamClient(max_connections=2, connect_timeout_s=2) as c:
        r = await go(c, f"http://127.0.0.1:{free_port()}/v1/chat/completions")
    assert r.status is None and r.failure is FailureClass.CLIENT, (r.failure, r.failure_detail)
    assert r.failure_detail is not None and r.failure_detail.startswith(words), r.failure_detail
    assert "ClientConnectorError" in r.failure_detail


def test_classify_looks_through_wrapped_errors() -> None:
    c = StreamClient(max_connections=1)

    def classify(exc: Exception) -> RequestResult:
        r = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0)
        c._failed(exc, r, got_headers=False, watch=None)
        return r

    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as inner:
            raise aiohttp.ClientOSError("connect failed") from inner
    except aiohttp.ClientOSError as outer:
        r = classify(outer)
    assert r.failure is FailureClass.CLIENT
    assert r.failure_detail is not None and "(EMFILE)" in r.failure_detail
    r = classify(OSError(errno.ENOBUFS, "No buffer space available"))  # a bare OSError
    assert r.failure is FailureClass.CLIENT
    # The server's refusals stay the server's.
    assert classify(ConnectionRefusedError(errno.ECONNREFUSED, "x")).failure is FailureClass.CONNECT
