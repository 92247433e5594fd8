"""The read loop's receive-queue samples (loadgen.read_health) against a real socket.

The server runs on its own thread (a plain socket, chunked SSE), so that a client whose
loop is busy falls behind it for real: the server keeps writing, the kernel queues.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from loadgen.client import StreamClient, _sample_queue
from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats
from loadgen.read_health import MIN_SAMPLES_1S, SAMPLE_EVERY, QueueProbe, ReadTally, queue_probe

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on Linux"),
]


def event(i: int) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


USAGE = (
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}\n\n'
)


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def serve_one(conn: socket.socket, tokens: int, gap_s: float, burst: bool) -> None:
    """Answer one POST with ``tokens`` events: all at once (``burst``) or one per gap."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += conn.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = next(
        (
            int(h.split(b":")[1])
            for h in head.split(b"\r\n")
            if h.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(rest) < length:
        rest += conn.recv(65536)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    events = [http_chunk(event(i)) for i in range(tokens)]
    if burst:
        conn.sendall(b"".join(events))
    else:
        for e in events:
            conn.sendall(e)
            time.sleep(gap_s)
    conn.sendall(http_chunk(USAGE % (tokens, tokens + 1)) + http_chunk(b"data: [DONE]\n\n"))
    conn.sendall(b"0\r\n\r\n")
    conn.close()


@contextmanager
def thread_server(tokens: int, gap_s: float = 0.0, burst: bool = False) -> Iterator[str]:
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]

    def run() -> None:
        with lsock:
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            serve_one(conn, tokens, gap_s, burst)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        lsock.close()
        t.join(10)


async def one_stream(url: str, *, stall_s: float = 0.0, sample: bool = True) -> RequestResult:
    async with StreamClient(max_connections=1, sample_queue=sample) as client:
        if stall_s:
            # The loop busy elsewhere (another stream's work, a slow callback) for a
            # moment once the headers are in: the server's writes pile up meanwhile.
            async def stall() -> None:
                await asyncio.sleep(0.05)
                time.sleep(stall_s)  # noqa: ASYNC251 - blocking the loop is the point

            hog = asyncio.create_task(stall())
        result = await client.stream(url, b"{}", request_id="r1", worker=0, prompt_id=0)
        if stall_s:
            await hog
    return result


def test_a_client_behind_a_burst_finds_bytes_queued() -> None:
    with thread_server(tokens=4000, burst=True) as url:
        r = asyncio.run(one_stream(url, stall_s=0.2))
    assert r.ok, r.failure_detail
    assert r.chunks == 4000
    assert r.queue_samples >= 2
    assert r.queue_hits >= 1
    assert r.queued_bytes_max > 0
    assert r.coalesced > 0  # several events per read: gaps of 0
    assert r.itl_ns.count(0) == r.coalesced


def test_a_client_that_keeps_up_finds_nothing_queued() -> None:
    tokens = SAMPLE_EVERY * 5
    with thread_server(tokens=tokens, gap_s=0.004) as url:
        r = asyncio.run(one_stream(url))
    assert r.ok, r.failure_detail
    assert r.queue_samples >= 4  # measured, and found the queue empty
    assert r.queue_hits == 0
    assert r.queued_bytes_max == 0


def test_sampling_off_is_not_measured_never_zero() -> None:
    with thread_server(tokens=SAMPLE_EVERY * 3, burst=True) as url:
        r = asyncio.run(one_stream(url, sample=False))
    assert r.ok
    assert r.queue_samples == 0  # "not measured" ...
    stats = LiveLoadStats(window_s=10)
    stats.record(r, 1.5)
    rh = stats.reads(2.5)
    assert rh.behind_fraction is None  # ... is no fraction, not 0 %
    assert rh.load_behind_fraction is None


def result(chunks: int = 64, coalesced: int = 0) -> RequestResult:
    r = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0, end_ns=1)
    r.chunks, r.coalesced = chunks, coalesced
    return r


def test_live_reads_take_each_tick_from_the_clients_tally() -> None:
    tally = ReadTally()
    stats = LiveLoadStats(window_s=10, tally=tally)
    for second in range(5):  # 40 samples a second; from the third on, 28 found bytes queued
        tally.samples += 40
        tally.hits += 28 if second >= 2 else 0
        stats.record(result(chunks=64, coalesced=32), second + 0.5)
        stats.tick_reads(second + 1.0, bound=0.5, measuring=True)
    rh = stats.reads(6.0)
    assert rh.behind_fraction_1s == pytest.approx(0.7)
    assert rh.behind_fraction == pytest.approx(84 / 200)
    assert rh.events_per_read == pytest.approx(2.0)
    assert (rh.samples, rh.hits) == (200, 84)
    assert stats.behind_streak.longest_s == pytest.approx(2.0)  # ticks at 3, 4, 5 s
    assert stats.behind_streak.best_mean == pytest.approx(0.7)


def test_samples_outside_the_load_and_thin_seconds_say_nothing() -> None:
    tally = ReadTally()
    stats = LiveLoadStats(window_s=10, tally=tally)
    tally.samples = tally.hits = 500  # the before-load gates' streams
    stats.tick_reads(1.0, bound=0.5, measuring=False)
    tally.samples += MIN_SAMPLES_1S - 1
    tally.hits += MIN_SAMPLES_1S - 1
    rh = stats.tick_reads(2.0, bound=0.5, measuring=True)
    assert rh.behind_fraction_1s is None  # too few samples in that second to say
    assert rh.behind_fraction == 1.0
    assert rh.samples == MIN_SAMPLES_1S - 1
    assert stats.behind_streak.since is None


def test_the_client_counts_its_samples_in_its_tally_as_it_reads() -> None:
    tally = ReadTally()

    async def go(url: str) -> RequestResult:
        async with StreamClient(max_connections=1, read_tally=tally) as client:
            return await client.stream(url, b"{}", request_id="r", worker=0, prompt_id=0)

    with thread_server(tokens=SAMPLE_EVERY * 4, gap_s=0.002) as url:
        r = asyncio.run(go(url))
    assert r.queue_samples >= 3
    assert (tally.samples, tally.hits) == (r.queue_samples, r.queue_hits)


def test_a_tick_too_soon_after_another_carries_its_samples_and_keeps_the_streak() -> None:
    tally = ReadTally()
    stats = LiveLoadStats(window_s=10, tally=tally)

    def tick(t: float, samples: int, hits: int) -> float | None:
        tally.samples += samples
        tally.hits += hits
        return stats.tick_reads(t, bound=0.5, measuring=True).behind_fraction_1s

    assert tick(1.0, 40, 36) == pytest.approx(0.9)
    assert tick(2.0, 40, 36) == pytest.approx(0.9)
    assert tick(2.05, 5, 5) is None  # a late loop's catch-up tick: too few to say
    assert tick(3.0, 35, 31) == pytest.approx(0.9)  # 40 samples, 36 behind, carried
    assert stats.behind_streak.longest_s == pytest.approx(2.0)
    for t in range(4, 11):  # idle: nothing sampled for 7 s ends the streak
        assert tick(float(t), 0, 0) is None
    assert stats.behind_streak.since is None


class _Transport:
    def __init__(self, sock: socket.socket, tls: bool = False) -> None:
        self.sock, self.tls, self.closing = sock, tls, False

    def get_extra_info(self, key: str) -> object:
        if key == "sslcontext":
            return object() if self.tls else None
        return self.sock if key == "socket" else None

    def is_closing(self) -> bool:
        return self.closing


class _Conn:  # as aiohttp's Connection: its transport is None once released to the pool
    def __init__(self, transport: _Transport | None) -> None:
        self.transport = transport


class _Resp:
    def __init__(self, conn: _Conn | None) -> None:
        self.connection = conn


def _probe(sock: socket.socket, tls: bool = False) -> tuple[QueueProbe, _Conn]:
    conn = _Conn(_Transport(sock, tls))
    probe = queue_probe(_Resp(conn))
    assert probe is not None or tls
    return probe, conn  # type: ignore[return-value]


def test_a_probe_finds_the_bytes_waiting_on_its_own_socket() -> None:
    a, b = socket.socketpair()
    with a, b:
        probe, _ = _probe(a)
        assert probe.queued() == 0
        b.sendall(b"x" * 300)
        time.sleep(0.01)
        assert probe.queued() == 300


def test_a_socket_closed_under_the_stream_is_not_measured_though_its_number_is_reused() -> None:
    """A bare fd number sampled after its socket closed read another file's bytes (5000
    from a reused number); the probe holds the socket, and says "not measured"."""
    a, b = socket.socketpair()
    probe, _ = _probe(a)
    number = a.fileno()
    a.close()
    other = os.open(__file__, os.O_RDONLY)  # any file: it takes the freed number ...
    try:
        if other != number:
            os.dup2(other, number)  # ... or is made to
        assert probe.queued() == -1
        r, tally = result(), ReadTally()
        _sample_queue(probe, r, tally)
        assert (r.queue_samples, r.queue_hits, tally.samples) == (0, 0, 0)
    finally:
        b.close()
        os.close(other)
        if other != number:
            os.close(number)


def test_a_released_or_closing_connection_is_not_measured() -> None:
    """Released to the pool, the socket may already carry another request's answer."""
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"next request's answer")
        time.sleep(0.01)
        probe, conn = _probe(a)
        assert probe.queued() > 0
        assert conn.transport is not None
        conn.transport.closing = True
        assert probe.queued() == -1
        conn.transport = None  # released
        assert probe.queued() == -1


def test_sockets_that_cannot_be_asked_give_no_probe_and_no_sample(tmp_path: Path) -> None:
    a, b = socket.socketpair()
    with a, b:
        assert queue_probe(_Resp(_Conn(_Transport(a, tls=True)))) is None  # ciphertext
        assert queue_probe(_Resp(None)) is None  # released before the first read
        assert queue_probe(_Resp(_Conn(None))) is None
        live = _Conn(_Transport(a))
        unknown = os.open(tmp_path, os.O_RDONLY)  # an fd FIONREAD refuses (ENOTTY)
        try:
            assert QueueProbe(live, _Fileno(unknown)).queued() == -1
        finally:
            os.close(unknown)
        assert QueueProbe(live, _Fileno(unknown)).queued() == -1  # EBADF
        assert QueueProbe(live, _Fileno(-1)).queued() == -1  # closed


class _Fileno:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd
