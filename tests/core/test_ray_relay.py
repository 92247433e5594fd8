"""``--ray``: the relay between a shard on a node and its coordinator, without a cluster.

The node side (:class:`soak.run.ray_host.ShardHost`) runs here on a real child process;
the coordinator side (:class:`soak.run.ray_shards.RayShardProcess`) talks to an actor
that stands in for Ray's (a Ray call is a thread here: the same futures, no cluster).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.envelope import RequestResult
from soak.run import ray_host, ray_shards
from soak.run.ray_host import ShardHost
from soak.run.shard_links import ShardLink, shift_result
from soak.run.shard_protocol import encode_result, parse_line

ray = pytest.importorskip("ray", reason="soaktop[distributed] (Ray) is not installed")

OFFSET_NS = 5_000_000_000
"""The fake node's clock: 5 s ahead of this process's."""


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the node's $TMPDIR
    hosts: list[ShardHost] = []

    def make(script: str) -> ShardHost:
        h = ShardHost(0, "run-1")
        h._spawn([sys.executable, "-c", script])
        hosts.append(h)
        return h

    yield make
    for h in hosts:
        h.kill()
        if h.proc is not None:
            h.proc.wait(timeout=10)


def test_a_shard_whose_output_nobody_reads_is_killed_at_the_cap(host, monkeypatch):
    # A coordinator that stopped polling calls no read(): the cap must hold without one.
    monkeypatch.setattr(ray_host, "MAX_PENDING", 1 << 20)
    h = host("import sys\nwhile True: sys.stdout.buffer.write(b'x' * 1023 + b'\\n')")
    assert h.proc.wait(timeout=20) == -9
    assert len(h.out.pending) < 4 << 20  # the cap, and what the pipe held beyond it


def test_a_shard_nobody_polls_any_more_gets_end_of_stdin_then_is_killed(host, monkeypatch):
    # A killed coordinator's actors may live on: the node itself must end its shard.
    monkeypatch.setattr(ray_host, "ORPHAN_AFTER_S", 0.5)
    monkeypatch.setattr(ray_host, "ORPHAN_KILL_S", 0.5)
    h = host("import sys\nsys.stdin.buffer.read()\nsys.exit(7)")  # exits at end of stdin
    assert h.proc.wait(timeout=10) == 7
    deaf = host(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)"
    )
    assert deaf.proc.wait(timeout=10) == -9  # one that ignores its stdin is killed


def test_a_polled_shard_is_left_alone(host, monkeypatch):
    monkeypatch.setattr(ray_host, "ORPHAN_AFTER_S", 0.5)
    h = host("import sys\nsys.stdin.buffer.read()\nsys.exit(7)")
    for _ in range(8):  # 1.6 s of polls, each well within 0.5 s of the last
        h.read(0.1)
    assert h.proc.poll() is None


def test_a_partial_line_waits_for_its_end_without_waking_the_poll(host):
    h = host(
        "import sys, time\n"
        "sys.stdout.write('abc'); sys.stdout.flush(); time.sleep(1.0)\n"
        "sys.stdout.write('def\\n'); sys.stdout.flush()"
    )
    time.sleep(0.3)  # 'abc' is on the node by now
    t0 = time.monotonic()
    assert h.read(0.4) == (b"", b"", None)
    assert time.monotonic() - t0 >= 0.4  # the long poll waited: no empty answer at once
    got = b""
    deadline = time.monotonic() + 10
    rc = None
    while rc is None and time.monotonic() < deadline:
        out, _, rc = h.read(1.0)
        got += out
    assert (got, rc) == (b"abcdef\n", 0)
    assert h.finish()["lines"] == 1


class _Ref:
    def __init__(self, fut: concurrent.futures.Future[Any]) -> None:
        self._fut = fut

    def future(self) -> concurrent.futures.Future[Any]:
        return self._fut


class _Method:
    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor, fn: Any) -> None:
        self._pool, self._fn = pool, fn

    def remote(self, *args: Any) -> _Ref:
        return _Ref(self._pool.submit(self._fn, *args))


class _Actor:
    """A threaded actor as Ray's: each method's ``.remote`` runs it on a thread."""

    def __init__(self, obj: Any) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(4)
        self._obj = obj

    def __getattr__(self, name: str) -> _Method:
        return _Method(self._pool, getattr(self._obj, name))


class _FakeRay:
    """What :class:`RayShards` uses of the ``ray`` module."""

    exceptions = ray.exceptions

    def __init__(self, host: Any) -> None:
        self.host = host
        self.util = self

    def remote(self, _cls: Any) -> Any:
        fake = self

        class _Cls:
            def options(self, **_kw: Any) -> Any:
                return self

            def remote(self, *_args: Any) -> _Actor:
                return _Actor(fake.host)

        return _Cls()

    def kill(self, _actor: Any) -> None:
        pass

    def remove_placement_group(self, _pg: Any) -> None:
        pass


class _AheadHost:
    """A node whose monotonic clock reads 5 s ahead; it finishes one request."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.lines: list[bytes] = []
        self.gone = False

    def start(self) -> dict[str, Any]:
        return {"node_id": "n" * 20, "ip": "10.0.0.9", "pid": 4242, "journal": "/tmp/x"}

    def clock(self) -> int:
        return time.perf_counter_ns() + OFFSET_NS

    def write(self, data: bytes) -> bool:
        self.written.append(data)
        return True

    def read(self, wait_s: float) -> tuple[bytes, bytes, int | None]:
        if self.gone:
            raise ray.exceptions.ActorDiedError()
        time.sleep(min(wait_s, 0.02))
        out = b"".join(self.lines)
        self.lines.clear()
        return out, b"", None

    def finish(self) -> dict[str, Any]:
        return {"sha256": "", "lines": 0}

    def kill(self) -> None:
        self.gone = True


async def _shard(node: Any) -> tuple[ShardLink, Any]:
    shards = ray_shards.RayShards(_FakeRay(node), "10.0.0.1:6379", 1, object(), "run-1")
    link = ShardLink(0, 4)
    return link, await shards(link, {})


async def test_a_node_clock_ahead_lands_its_results_on_the_coordinators_timeline():
    node = _AheadHost()
    link, proc = await _shard(node)
    # The offset is the shard's clock minus the coordinator's (ShardLink's sign).
    assert abs(link.clock_offset_ns - OFFSET_NS) <= link.clock_offset_ns // 1000 + 20_000_000
    here = time.perf_counter_ns()
    assert abs(link.to_shard(here) - node.clock()) < 50_000_000  # release's t0, its clock
    sent = node.clock() - 200_000_000  # sent 0.2 s ago and ended now, by the node's clock
    r = RequestResult("r-1", 0, 0, sent_ns=sent, first_token_ns=sent + 1000, end_ns=node.clock())
    node.lines.append(encode_result(r, 0))
    got = parse_line(await asyncio.wait_for(proc.stdout.readline(), 5))
    assert isinstance(got, RequestResult)
    shift_result(got, link.clock_offset_ns)  # what the coordinator's follower does
    now = time.perf_counter_ns()
    assert got.end_ns is not None and abs(got.end_ns - now) < 100_000_000
    assert abs(got.sent_ns - (now - 200_000_000)) < 100_000_000
    node.gone = True
    assert await asyncio.wait_for(proc.wait(), 10) is None


async def test_a_lost_host_has_no_exit_status_and_says_what_was_lost():
    node = _AheadHost()
    _, proc = await _shard(node)
    node.gone = True  # its actor died with its node
    assert await asyncio.wait_for(proc.wait(), 10) is None
    assert proc.returncode is None
    assert "its host, node 10.0.0.9 (nnnnnnnnnnnn), was lost (ActorDiedError)" in (
        proc.facts.lost_why
    )
    assert b"ray: its host" in await proc.stderr.read()


async def test_the_spec_travels_in_calls_small_enough_to_stay_out_of_the_object_store():
    node = _AheadHost()
    _, proc = await _shard(node)
    spec = b"".join(b'{"t":"spec","pool":"%06d"}\n' % k for k in range(20_000))  # ~560 KiB
    proc.stdin.write(spec)
    proc.stdin.write(b'{"t":"stop"}\n')
    for _ in range(1000):  # 10 s at most
        if b"".join(node.written) == spec + b'{"t":"stop"}\n':
            break
        await asyncio.sleep(0.01)
    assert b"".join(node.written) == spec + b'{"t":"stop"}\n'  # every byte, in order
    assert max(len(w) for w in node.written) <= 100 * 1024  # Ray inlines these
    node.gone = True
    await asyncio.wait_for(proc.wait(), 10)
