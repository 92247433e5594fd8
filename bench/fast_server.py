"""A minimal, fast vLLM-format streaming server for client-cost benchmarks.

Raw asyncio (no web framework), HTTP/1.1 keep-alive, chunked SSE with pre-encoded chunks in
vLLM 0.32's exact byte format (compact JSON, role chunk, one chunk per token, the last token
chunk carrying ``finish_reason``, a usage chunk with ``include_usage``, ``data: [DONE]``).

Endpoints: ``GET /v1/models``, ``GET /health``, ``POST /v1/completions``,
``POST /v1/chat/completions`` (``stream: true``; non-streaming answers one JSON body), and
``GET /bench/stats`` (active streams, requests and tokens sent — for the bench's
steady-state window; costs the server nothing per token).

Pacing:
- ``--token-interval-ms 20``: one global ticker; every tick each active stream gets its next
  token as its own socket write (a decode step of a batching GPU server: one token per
  stream per step, so one token per client read).
- ``--token-interval-ms 0`` (unpaced): on arrival the whole response is written one event
  per ``write()`` in a tight loop, as fast as the server can; the client then finds several
  events per read.

Lengths: ``--length-spread F`` (0 ≤ F < 1) ends each streamed answer at its EOS, a
uniform draw up to F × ``max_tokens`` short (the last chunk says ``finish_reason: stop``),
as a model's answers vary; 0 (the default) sends ``max_tokens`` every time.

Processes: ``--procs N`` (default 1) serves from N processes, each with its own loop,
ticker and listening socket on the one port (``SO_REUSEPORT``: the kernel spreads the
connections). One process writes about 100k one-token events a second on this host's
cores, so a client with cores of its own needs a server with more than one; the helpers
are forked before any loop exists, post their counts every 0.1 s to a shared board that
``/bench/stats`` sums, and end with the first process (its SIGTERM, or its death).

Run: ``python bench/fast_server.py --port 8000 --token-interval-ms 20``; it prints
``READY <port>`` once every process listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import mmap
import os
import random
import resource
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any

import orjson

MODEL = "tiny"
_SYLLABLES = ("ka", "lo", "mi", "ne", "tor", "vas", "qui", "del", "ur", "sen", "pha", "zo")
_PIECES = [" " + a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in ("", "s", "n", "r")]
WORDS = [*_PIECES[:509], ",", ".", "\\n"]
"""512 text tokens (as JSON string bodies), so that a client's sanity checks see varied
text, as from a real model, and do their real work (a short cycle would be flagged)."""
SEQUENCE_LEN = 4096
_RNG = random.Random(7)
SEQUENCE = [_RNG.randrange(len(WORDS)) for _ in range(SEQUENCE_LEN)]
"""The order tokens are sent in: one fixed pseudo-random walk, each stream starting at its
own offset (the hot path only indexes lists)."""


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Encoded:
    """Pre-encoded, pre-framed SSE events for one endpoint kind (chat or completions)."""

    def __init__(self, chat: bool) -> None:
        created = int(time.time())
        if chat:
            head = (
                b'data: {"id":"chatcmpl-bench0000000000","object":"chat.completion.chunk",'
                b'"created":%d,"model":"%s","choices":[{"index":0,"delta":{"content":"'
                % (created, MODEL.encode())
            )
            tail = b'"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            tail_last = (
                b'"},"logprobs":null,"finish_reason":"length","stop_reason":null,'
                b'"token_ids":null}]}\n\n'
            )
            self.role = _frame(
                b'data: {"id":"chatcmpl-bench0000000000","object":"chat.completion.chunk",'
                b'"created":%d,"model":"%s","choices":[{"index":0,"delta":{"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null}],'
                b'"prompt_token_ids":null,"prompt_text":null}\n\n' % (created, MODEL.encode())
            )
            self.usage_head = (
                b'data: {"id":"chatcmpl-bench0000000000","object":"chat.completion.chunk",'
                b'"created":%d,"model":"%s","choices":[],' % (created, MODEL.encode())
            )
        else:
            head = (
                b'data: {"id":"cmpl-bench0000000000","object":"text_completion",'
                b'"created":%d,"model":"%s","choices":[{"index":0,"text":"'
                % (created, MODEL.encode())
            )
            tail = (
                b'","logprobs":null,"finish_reason":null,"stop_reason":null,'
                b'"prompt_token_ids":null,"token_ids":null}]}\n\n'
            )
            tail_last = (
                b'","logprobs":null,"finish_reason":"length","stop_reason":null,'
                b'"prompt_token_ids":null,"token_ids":null}]}\n\n'
            )
            self.role = b""
            self.usage_head = (
                b'data: {"id":"cmpl-bench0000000000","object":"text_completion",'
                b'"created":%d,"model":"%s","choices":[],' % (created, MODEL.encode())
            )
        self.tokens = [_frame(head + w.encode() + tail) for w in WORDS]
        self.last = [_frame(head + w.encode() + tail_last) for w in WORDS]
        stop = tail_last.replace(b'"finish_reason":"length"', b'"finish_reason":"stop"')
        self.stop = [_frame(head + w.encode() + stop) for w in WORDS]
        """The last token of an answer that ended before ``max_tokens`` (EOS)."""
        self.done = _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.chat = chat

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return _frame(
            self.usage_head
            + b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}\n\n'
            % (prompt_tokens, prompt_tokens + completion_tokens, completion_tokens)
        )


SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _json_response(obj: Any, status: str = "200 OK") -> bytes:
    body = orjson.dumps(obj)
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        len(body),
        body,
    )


class Stats:
    def __init__(self) -> None:
        self.active = 0
        self.started = 0
        self.finished = 0
        self.tokens = 0


POST_S = 0.1
"""How often a server process posts its counts to the board (``--procs`` above 1)."""


class StatsBoard:
    """The processes' counts in one anonymous shared mapping made before the fork: each
    process posts its own slot every ``POST_S`` (never per token: the hot path only bumps
    its own ``Stats``), and ``/bench/stats`` sums the slots."""

    FIELDS = 4

    def __init__(self, procs: int) -> None:
        self.procs, self.slot = procs, 0
        self.mem = mmap.mmap(-1, 8 * self.FIELDS * procs)

    def post(self, stats: Stats) -> None:
        values = (stats.active, stats.started, stats.finished, stats.tokens)
        struct.pack_into("4q", self.mem, 8 * self.FIELDS * self.slot, *values)

    def sums(self, own: tuple[int, ...]) -> tuple[int, ...]:
        rows = [
            own if i == self.slot else struct.unpack_from("4q", self.mem, 8 * self.FIELDS * i)
            for i in range(self.procs)
        ]
        return tuple(sum(col) for col in zip(*rows, strict=True))


class Stream:
    """One in-flight paced response."""

    __slots__ = ("at", "conn", "enc", "i", "last", "n", "prompt_tokens", "usage")

    def __init__(
        self,
        conn: Conn,
        enc: Encoded,
        n: int,
        usage: bool,
        prompt_tokens: int,
        at: int,
        last: list[bytes],
    ) -> None:
        self.conn = conn
        self.enc = enc
        self.last = last  # the last token's events: finish "length", or "stop" (EOS)
        self.n = n
        self.i = 0
        self.at = at  # where in SEQUENCE this stream's text starts
        self.usage = usage
        self.prompt_tokens = prompt_tokens


class Server:
    def __init__(
        self, interval_s: float, length_spread: float = 0.0, board: StatsBoard | None = None
    ) -> None:
        self.interval_s = interval_s
        self.length_spread = length_spread
        self.rng = random.Random(11 + (board.slot if board else 0))
        self.stats = Stats()
        self.board = board
        self.chat = Encoded(chat=True)
        self.completions = Encoded(chat=False)
        self.active: list[Stream] = []

    def totals(self) -> dict[str, int]:
        """Every server process's counts summed (this one's live, the others' as last
        posted, at most ``POST_S`` old)."""
        st = self.stats
        own = (st.active, st.started, st.finished, st.tokens)
        sums = self.board.sums(own) if self.board else own
        return dict(zip(("active", "started", "finished", "tokens"), sums, strict=True))

    async def ticker(self) -> None:
        """Paced mode: every tick, each active stream gets one token (its own write)."""
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        stats = self.stats
        while True:
            nxt += self.interval_s
            delay = nxt - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:  # fell behind (server saturated): don't try to catch up in a burst
                nxt = loop.time()
                await asyncio.sleep(0)
            if not self.active:
                continue
            keep: list[Stream] = []
            for s in self.active:
                if s.conn.closed:
                    stats.active -= 1
                    continue
                i = s.i
                enc = s.enc
                w = s.conn.write
                if i + 1 < s.n:
                    w(enc.tokens[SEQUENCE[(s.at + i) & 4095]])
                    s.i = i + 1
                    keep.append(s)
                else:
                    w(s.last[SEQUENCE[(s.at + i) & 4095]])
                    if s.usage:
                        w(enc.usage(s.prompt_tokens, s.n))
                    w(enc.done)
                    stats.active -= 1
                    stats.finished += 1
                stats.tokens += 1
            self.active = keep

    def start_stream(self, conn: Conn, enc: Encoded, n: int, usage: bool, pt: int) -> None:
        stats = self.stats
        last = enc.last
        if self.length_spread > 0:  # an answer that ends at its EOS, short of max_tokens
            short = self.rng.randrange(int(n * self.length_spread) + 1)
            if short and n - short >= 1:
                n, last = n - short, enc.stop
        stats.started += 1
        conn.write(SSE_HEADERS)
        if enc.role:
            conn.write(enc.role)
        if self.interval_s > 0:
            stats.active += 1
            self.active.append(Stream(conn, enc, n, usage, pt, stats.started * 257, last))
            return
        # Unpaced: everything now, one write per event.
        w = conn.write
        toks = enc.tokens
        at = stats.started * 257
        for i in range(at, at + n - 1):
            w(toks[SEQUENCE[i & 4095]])
        w(last[SEQUENCE[(at + n - 1) & 4095]])
        if usage:
            w(enc.usage(pt, n))
        w(enc.done)
        stats.tokens += n
        stats.finished += 1


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests are handled in order."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            lower = head.lower()
            i = lower.find(b"content-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i)
                length = int(head[i + 15 : j if j >= 0 else len(head)])
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.handle(head, body)

    def handle(self, head: bytes, body: bytes) -> None:
        line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
        parts = line.split(b" ")
        method, path = parts[0], parts[1].split(b"?")[0] if len(parts) > 1 else b"/"
        srv = self.server
        if method == b"GET":
            if path == b"/v1/models":
                obj: Any = {
                    "object": "list",
                    "data": [{"id": MODEL, "object": "model", "max_model_len": 1 << 20}],
                }
                self.write(_json_response(obj))
            elif path == b"/health":
                self.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            elif path == b"/bench/stats":
                self.write(_json_response(srv.totals()))
            else:
                self.write(_json_response({"error": {"message": "not found"}}, "404 Not Found"))
            return
        if path not in (b"/v1/chat/completions", b"/v1/completions"):
            self.write(_json_response({"error": {"message": "not found"}}, "404 Not Found"))
            return
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.write(_json_response({"error": {"message": "bad json"}}, "400 Bad Request"))
            return
        chat = path == b"/v1/chat/completions"
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 256)
        n = max(1, n)
        prompt = req.get("prompt") if not chat else req.get("messages")
        pt = max(1, len(orjson.dumps(prompt)) // 4)
        if not req.get("stream"):
            text = "".join(orjson.loads(f'"{WORDS[SEQUENCE[i & 4095]]}"') for i in range(n))
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            usage = {"prompt_tokens": pt, "completion_tokens": n, "total_tokens": pt + n}
            self.write(_json_response({"id": "x", "choices": [choice], "usage": usage}))
            srv.stats.tokens += n
            return
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        srv.start_stream(self, srv.chat if chat else srv.completions, n, include_usage, pt)


def _listen(host: str, port: int, shared_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared_port:  # each process its own socket on one port: the kernel spreads connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


async def serve(args: argparse.Namespace, sock: socket.socket, board: StatsBoard | None) -> None:
    """One server process: its own loop, ticker and streams on its own listening socket;
    it runs until SIGTERM or SIGINT (or, for a helper process, until the first is gone)."""
    server = Server(args.token_interval_ms / 1000.0, args.length_spread, board)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Conn(server), sock=sock)
    ticker = asyncio.create_task(server.ticker()) if server.interval_s > 0 else None
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    poster = asyncio.create_task(_post(server, board, stop)) if board else None
    if board is None or board.slot == 0:
        print(f"READY {sock.getsockname()[1]} pid={os.getpid()}", flush=True)
    await stop.wait()
    for task in (ticker, poster):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    srv.close()
    sys.stdout.flush()


async def _post(server: Server, board: StatsBoard, stop: asyncio.Event) -> None:
    parent = os.getppid()
    while True:
        board.post(server.stats)
        if board.slot and os.getppid() != parent:  # the first process is gone: so is this
            stop.set()
        await asyncio.sleep(POST_S)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token-interval-ms", type=float, default=20.0)
    ap.add_argument(
        "--length-spread",
        type=float,
        default=0.0,
        help="streamed answers end at EOS (finish 'stop') up to this share short of "
        "max_tokens, uniformly (0: every answer is max_tokens long, finish 'length')",
    )
    ap.add_argument(
        "--procs", type=int, default=1,
        help="server processes on the one port (SO_REUSEPORT), each with its own ticker: "
        "a machine with spare cores needs a server one core cannot carry",
    )  # fmt: skip
    args = ap.parse_args()
    if not 0.0 <= args.length_spread < 1.0:
        ap.error(f"--length-spread {args.length_spread}: allowed 0 <= F < 1")
    if args.procs < 1:
        ap.error(f"--procs {args.procs}: allowed 1 or more")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft < want:  # a connection a stream: a shell's 1,024 would stop the bench there
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    shared = args.procs > 1
    sock = _listen(args.host, args.port, shared)
    board = StatsBoard(args.procs) if shared else None
    helpers = [_fork_helper(args, sock, board, slot) for slot in range(1, args.procs)]
    try:
        asyncio.run(serve(args, sock, board))
    finally:
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in helpers:
            os.waitpid(pid, 0)


def _fork_helper(
    args: argparse.Namespace, first: socket.socket, board: StatsBoard | None, slot: int
) -> int:
    """Fork a helper server process (before any loop or thread exists here) with its own
    socket on ``first``'s port; it returns only once the helper listens, so READY means
    every process takes connections."""
    assert board is not None
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: whatever happens, it never returns into the parent's code
        code = 0
        try:
            os.close(ready_r)
            port = first.getsockname()[1]
            first.close()  # the first process's: a helper holding it would strand its queue
            board.slot = slot
            sock = _listen(args.host, port, True)
            os.write(ready_w, b"1")
            os.close(ready_w)
            asyncio.run(serve(args, sock, board))
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)  # never the parent's cleanup (its helpers, its atexit)
    os.close(ready_w)
    if os.read(ready_r, 1) != b"1":
        raise SystemExit(f"fast_server: helper {slot} did not start")
    os.close(ready_r)
    return pid


if __name__ == "__main__":
    main()
