"""One load shard: ``python -m soak.run.shard_main``, started by the coordinator.

A shard is an ordinary closed loop (:class:`loadgen.workers.LoadGenerator`) on its own
process and event loop, for its share of the run's workers — or an open loop
(:class:`ShardOpenLoop`) that draws the run's whole arrival schedule and sends its own
share of it, the arrivals ``g`` with ``g % shards == index``; it streams, which is the
per-token cost that needs more than one core, and forwards each finished request to
the coordinator as one line (:mod:`soak.run.shard_protocol`). It never writes to disk:
the coordinator journals. Its spec (headers included) arrives on stdin; stdout is the
protocol only (anything Python would print goes to stderr, which the coordinator copies
into the redacted ``runner.log``). End of stdin aborts: a shard never outlives its
coordinator.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from loadgen import eventloop
from loadgen.arrivals import RateCurve, curve_draws
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.open_loop import OpenLoopGenerator
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.read_health import PROCESS_TALLY
from loadgen.trace_source import TraceSource
from loadgen.workers import LoadGenerator, LoadPlan, StreamingClient
from probes.host import LoopLagMonitor, raise_fd_limit
from soak.run.heap_policy import LoadHeap
from soak.run.shard_protocol import encode_result, global_index, message, share
from soak.run.shard_trace import trace_pool_from_spec
from soak.run.trace_setup import REPLAYED

HEARTBEAT_S = 1.0
"""How often a shard reports its live counters (the coordinator's snapshots sum them)."""


class ShardWorkers(LoadGenerator):
    """A shard's workers: request ``j`` of this shard is the run's ``j * shards + index``
    (its request id and its prompt), so the merged run sends what one process would."""

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        shards: int,
        index: int,
    ) -> None:
        super().__init__(plan, client, pool, bodies, on_result)
        self.shards = shards
        self.index = index

    def _next_seq(self) -> int | None:
        local = super()._next_seq()
        return None if local is None else global_index(local, self.shards, self.index)


class ShardOpenLoop(OpenLoopGenerator):
    """A shard's open loop: the run's schedule (same seed, curve and origin), of which
    it sends the arrivals ``g % shards == index`` — arrival ``g`` as request ``g``, its
    prompt the one ``g`` picks — so the shards together send, at the same intended
    instants, what one process would. (After a pause one process numbers its requests
    by those it sent, the shards by the schedule's arrival: the ids stay unique.)

    A trace replay (``schedule["replay"]``) sends the trace's times and lines, and ends
    its window once its last arrival is sent, as one process's replay does."""

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        schedule: dict[str, Any],
        shards: int,
        index: int,
    ) -> None:
        cap = share(int(schedule["max_in_flight"]), shards, index)
        replay = schedule.get("replay")
        if replay is not None:
            trace_pool = trace_pool_from_spec(replay)
            source = TraceSource(trace_pool, bodies)
            super().__init__(plan, client, trace_pool, bodies, on_result, iter(()), cap,
                             source=source)  # fmt: skip
            assert trace_pool.trace is not None
            scale = trace_pool.time_scale  # as trace_setup.scaled_offsets divides them
            times = [a.offset_s / scale for a in trace_pool.trace.arrivals]
            self._offsets = self._replayed(itertools.islice(times, index, None, shards))
        else:
            curve = RateCurve([(float(t), float(r)) for t, r in schedule["points"]])
            for t, r in schedule["changes"]:  # live changes made before this shard started
                curve.set_from(float(t), float(r))
            model, cv, seed = schedule["model"], schedule["burstiness"], schedule["seed"]
            draws = curve_draws(model, curve, cv, seed)
            mine: Iterator[float] = itertools.islice(draws, index, None, shards)
            # The first block of draws now, behind the barrier, not at the window's first
            # arrival (a numpy call, and this shard's first arrival would wait for it).
            mine = itertools.chain(list(itertools.islice(mine, 1)), mine)
            super().__init__(plan, client, pool, bodies, on_result, mine, cap, curve=curve)
        self.shards = shards
        self.index = index

    def _replayed(self, offsets: Iterator[float]) -> Iterator[float]:
        """The replay's times, then its window's end (its last arrival is sent before
        the scheduler asks for the next time)."""
        yield from offsets
        self.stop_issuing(REPLAYED)

    def settled_ns(self) -> int:
        """An instant before which every request this shard sent has ended and been
        handed to ``on_result`` (so its line is queued ahead of any report made now):
        the earliest send still in flight, else now. The coordinator's merged peak
        (:mod:`soak.run.shard_peak`) sweeps up to the least of the shards'."""
        return min((r.sent_ns for _, r in self._requests.values()), default=self._clock_ns())

    def _start(self, seq: int, arrival: int, intended_ns: int) -> None:
        g = global_index(arrival, self.shards, self.index)
        self._launch(g, self.source.request(g), intended_ns)


def pool_from_spec(spec: dict[str, Any]) -> PromptPool:
    """The run's prompt pool, exactly as the coordinator holds it (calibrated already)."""
    prompts = tuple(Prompt(int(i), str(text), nominal) for i, text, nominal in spec["prompts"])
    return PromptPool(prompts, spec["source"], bool(spec["unique_prefix"]))


def pool_spec(pool: PromptPool) -> dict[str, Any]:
    """What :func:`pool_from_spec` rebuilds the pool from."""
    return {
        "source": pool.source,
        "unique_prefix": pool.unique_prefix,
        "prompts": [[p.id, p.text, p.nominal_tokens] for p in pool.prompts],
    }


class _Pipe(asyncio.Protocol):
    """The protocol pipe's end: ``closed`` once everything written has gone."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


class Shard:
    """One shard's life: spec → workers up → ``ready`` → release → load → ``done``."""

    def __init__(self, spec: dict[str, Any], out: asyncio.WriteTransport, pipe: _Pipe) -> None:
        self.spec = spec
        self.out = out
        self.pipe = pipe
        self.index: int = spec["index"]
        self.shards: int = spec["shards"]
        self._pending: list[bytes] = []
        self._flush_soon = False
        self.sent = 0
        """Result lines sent: the coordinator's count of this shard's requests agrees."""
        self.lag = LoopLagMonitor()
        self.gen: ShardWorkers | ShardOpenLoop | None = None
        self.load: asyncio.Task[None] | None = None

    # -- output: batched per loop turn (one write for the results of a turn) -----------

    def send(self, line: bytes) -> None:
        self._pending.append(line)
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            self.out.write(data)

    def on_result(self, r: RequestResult) -> None:
        self.sent += 1
        self.send(encode_result(r, global_index(r.worker, self.shards, self.index)))

    def on_open_result(self, r: RequestResult) -> None:
        """An open loop's result: its ``worker`` (its endpoint's index) is the run's."""
        self.sent += 1
        self.send(encode_result(r, r.worker))

    async def flushed(self) -> None:
        """Every line written to the pipe, then the pipe closed (the coordinator reads
        them all before it sees our exit)."""
        self._flush()
        self.out.close()  # a pipe transport writes what it buffered before it closes
        await self.pipe.closed.wait()

    # -- the figures -------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        gen = self.gen
        assert gen is not None
        gs = gen.state
        # The worst loop lag since the last report, while the load runs (None before):
        # the coordinator keeps them and takes the p99 as the runner does its own, so a
        # shard's loop sorts nothing, and the figure's method is the runner's.
        lag = self.lag.take_interval(keep=False)
        use = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "in_flight": gs.in_flight,
            "issued": gs.issued,
            "workers_started": gs.workers_started,
            "cancelled": gs.cancelled,
            "backoffs": gs.backoffs,
            "paused": gen.paused,
            "lag_s": lag if self.load is not None else None,
            "cpu_s": round(use.ru_utime + use.ru_stime, 3),
            "requests": self.sent,
            # The socket samples its streams took (cumulative): the coordinator's
            # client_behind judges the processes that read the streams.
            "q_samples": PROCESS_TALLY.samples,
            "q_hits": PROCESS_TALLY.hits,
            # An open loop's own counts (the coordinator sums them; 0 for a closed loop).
            "held_by_cap": getattr(gs, "held_by_cap", 0),
            "in_flight_peak": getattr(gs, "in_flight_peak", 0),
            "skipped_paused": getattr(gs, "skipped_paused", 0),
            "settled_ns": gen.settled_ns() if isinstance(gen, ShardOpenLoop) else None,
        }

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            self.send(message("hb", **self.figures()))

    # -- the run -----------------------------------------------------------------------

    async def run(self, commands: asyncio.StreamReader) -> int:
        spec = self.spec
        plan = LoadPlan(**{**spec["plan"], "endpoints": tuple(spec["plan"]["endpoints"])})
        bodies = BodyBuilder(
            **{**spec["bodies"], "extra": tuple(tuple(kv) for kv in spec["bodies"]["extra"])}
        )
        raise_fd_limit(spec["client"]["max_connections"] + 256)
        self.lag.start()
        async with StreamClient(**spec["client"]) as client:
            pool, schedule = pool_from_spec(spec["pool"]), spec.get("schedule")
            gen: ShardWorkers | ShardOpenLoop
            if schedule is None:
                gen = ShardWorkers(
                    plan, client, pool, bodies, self.on_result, self.shards, self.index
                )
            else:
                gen = ShardOpenLoop(
                    plan, client, pool, bodies, self.on_open_result, schedule,
                    self.shards, self.index,
                )  # fmt: skip
            self.gen = gen
            gen.on_issue_end = lambda: self.send(
                message("issue_end", ns=gen.state.issue_ended_ns, reason=gen.state.stop_reason)
            )
            gen.on_release_end = lambda: self.send(
                message("release_end", ns=gen.state.release_ended_ns, turns=gen.state.release_turns)
            )
            beat = asyncio.create_task(self.heartbeat())
            await gen.start_workers()
            heap = LoadHeap()  # no full GC walk of the start-up's objects in the load
            try:
                await heap.settle()  # before ready: its stall is not the load's
                self.send(
                    message(
                        "ready",
                        clock_ns=time.perf_counter_ns(),
                        workers_started=gen.state.workers_started,
                        failures=dict(gen.state.start_failures),
                    )
                )
                await self._obey(commands, gen)
                if self.load is not None:
                    await self.load
            finally:
                heap.close()
            beat.cancel()
        self.lag.stop()
        gs = gen.state
        self.send(
            message(
                "done",
                **self.figures(),
                released_ns=gs.barrier_released_ns,
                issue_ended_ns=gs.issue_ended_ns,
                drain_ended_ns=gs.drain_ended_ns,
                stop_reason=gs.stop_reason,
                cancel_cause=gs.cancel_cause,
                worker_errors=dict(gs.worker_errors),
                failures=dict(gs.start_failures),
                requested=gs.requested,
            )
        )
        await self.flushed()
        return 0

    async def _obey(
        self, commands: asyncio.StreamReader, gen: ShardWorkers | ShardOpenLoop
    ) -> None:
        """Commands until the load is over (``done`` follows) or the barrier is torn down."""
        while True:
            read = asyncio.ensure_future(commands.readline())
            waits: set[asyncio.Future[Any]] = {read}
            if self.load is not None:
                waits.add(self.load)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():  # the load is over: nothing more to obey
                read.cancel()
                return
            line = read.result()
            cmd: dict[str, Any] = orjson.loads(line) if line.strip() else {"t": "eof"}
            kind = cmd["t"]
            if kind == "release" and self.load is None:
                if isinstance(gen, ShardOpenLoop):  # the schedule's origin: the run's
                    gen.origin_ns = int(cmd["t0"])
                self.lag.take_interval(keep=False)  # start-up lag is not load lag
                self.load = asyncio.create_task(gen.run())
                # Queued after the task's first step, which stamps the release time: a
                # shard lost later still has its release offset in the record.
                asyncio.get_running_loop().call_soon(
                    lambda: self.send(message("released", ns=gen.state.barrier_released_ns))
                )
            elif kind == "stop":
                gen.stop_issuing(str(cmd.get("reason") or "stopped"))
            elif kind == "pause":
                gen.pause()
            elif kind == "resume":
                gen.resume()
            elif kind == "set":
                gen.set_concurrency(int(cmd["n"]))
            elif kind == "rate" and isinstance(
                gen, ShardOpenLoop
            ):  # at the coordinator's instant: one curve in every shard
                gen.set_rate(float(cmd["rate"]), at_s=float(cmd["at_s"]))
            elif kind == "step":
                gen.step = cmd["step"]
            elif kind in ("abort", "cancel", "eof"):
                if self.load is None:  # torn down at the barrier: no load was issued
                    await gen.cancel_unstarted()
                    return
                gen.abort()  # in-flight requests are cut, and journaled as cancelled
                if kind == "eof":  # the coordinator is gone: nobody reads what follows
                    return


async def _main() -> int:
    loop = asyncio.get_running_loop()
    # stdout is the protocol: keep it for the pipe and point fd 1 at stderr, so nothing
    # a library prints can break a line.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    out, pipe = await loop.connect_write_pipe(_Pipe, os.fdopen(proto_fd, "wb", 0))
    commands = asyncio.StreamReader(limit=1 << 28)  # the spec carries the whole pool
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(commands), os.fdopen(0, "rb", 0)
    )
    first = await commands.readline()
    if not first.strip():
        return 2  # the coordinator went before it sent the spec
    spec = orjson.loads(first)
    shard = Shard(spec, out, pipe)
    return await shard.run(commands)


def main() -> int:
    """Run one shard on the loop the runner uses (uvloop where it exists)."""
    # An interrupt, a hang-up or a terminate for the runner's process group (systemd's
    # stop and ``kill -TERM -PGID`` signal every process of the run) is the
    # coordinator's to act on: it stops or aborts every shard and journals what they
    # finished; a shard that died of it would be lost, its in-flight requests with it.
    # A shard still ends: on its coordinator's word, at end of stdin, or by SIGKILL.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    return eventloop.run(_main())


if __name__ == "__main__":
    sys.exit(main())
