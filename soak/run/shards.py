"""``--shards N`` on one host: the closed loop's workers split over N shard processes
(an open loop's arrival schedule: :mod:`soak.run.shards_open`).

The coordinator is the ordinary runner: :class:`ShardedGenerator` stands where the
closed loop's :class:`~loadgen.workers.LoadGenerator` would (the same interface: the
barrier, the window, the drain, every control), and drives N children
(:mod:`soak.run.shard_main`), each streaming for its share of the workers on its own
event loop. Scale never enters the measuring path (DESIGN.md §10): the shards stream and
time; the coordinator parses one line per finished request and hands it to the ordinary
:meth:`~soak.run.request_sink.RequestSink.on_result`, so the one journal, the live
figures, the thresholds, finalize, ``verify`` and ``recover`` see one merged load.

How the coordinator holds each shard, copies its stderr, cleans its environment and words
its loss is :mod:`soak.run.shard_links`; what it keeps of their reports (socket samples,
loop lag, the record's ``shards[]``) is :mod:`soak.run.shard_reports`; how it starts one
is its ``launcher`` (a child process here; a transport to other hosts passes its own,
and its links' clock offsets).

One barrier: :meth:`ShardedGenerator.start_workers` returns when every shard has every
worker up; :meth:`ShardedGenerator.run` releases them all at once and owns the issue
window (the shards issue until told to stop, or until their share of ``--max-requests``).
A shard that exits before it said ``done`` is *lost*: an error event names it, the other
shards drain, and the verdict is INVALID (``shard_lost``, :mod:`soak.judge.shard_reasons`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any, Final

from loadgen.envelope import RequestResult
from loadgen.headers import secret_vars
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.read_health import ReadTally
from loadgen.release import release_words
from loadgen.tls import TlsFiles
from loadgen.workers import LoadGenerator, LoadPlan, StreamingClient
from soak.judge.shard_reasons import shard_name
from soak.record.models import ShardInfo
from soak.run.config import RunConfig
from soak.run.request_sink import RequestSink
from soak.run.shard_links import (
    ShardLauncher,
    ShardLink,
    ShardProcess,
    copy_shard_log,
    local_launcher,
    lost_words,
    shard_env,
    shift_result,
)
from soak.run.shard_main import pool_spec
from soak.run.shard_protocol import message, parse_line, shard_endpoints, share
from soak.run.shard_reports import add_lag, add_reads, shard_infos
from soak.run.steady_load import live_connections

SPAWN_GRACE_S: Final = 30.0
"""Beyond the barrier timeout, for a shard process to start (Python and its imports)."""
DONE_GRACE_S: Final = 10.0
"""Beyond the drain deadline (which each shard keeps itself), for its ``done`` to come."""
KILL_AFTER_S: Final = 5.0
"""After an abort, how long a shard may take to exit before it is killed."""


class ShardedGenerator(LoadGenerator):
    """The closed loop over N shard processes, with the generator interface the runner
    drives. A subclass so the run's state, snapshots and steps take it as they take the
    closed loop; none of the base's own workers run here."""

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        sink: RequestSink,
        shards: int,
        client_spec: Mapping[str, Any],
        launcher: ShardLauncher = local_launcher,
        secret_vars: Iterable[str] = (),
        **base: Any,
    ) -> None:
        self.links = [ShardLink(k, share(plan.concurrency, shards, k)) for k in range(shards)]
        self.launcher = launcher
        """How each shard is started (:data:`~soak.run.shard_links.ShardLauncher`): a
        child process here by default; a transport to other hosts passes its own."""
        super().__init__(plan, client, pool, bodies, sink.on_result, **base)
        self._sink = sink
        self._spec_base = {
            "shards": shards,
            "bodies": asdict(bodies),
            "pool": pool_spec(pool),
        }
        self._client_spec = dict(client_spec)
        # The secrets' source variables (loadgen.headers.secret_vars) stay out of the
        # shards' environment: the headers reach them on stdin.
        self._env = shard_env(os.environ, secret_vars)
        per_shard = int(client_spec["max_connections"])
        self._max_concurrency = per_shard * shards
        self._events_ended = asyncio.Event()
        """Set when every shard has ended its issue window (or is lost)."""
        self._read_tally: ReadTally | None = getattr(client, "read_tally", None)
        """The tally the run's live stats read (the coordinator's client's, which streams
        nothing here): the shards' socket samples are added to it, so ``client_behind``
        judges the shards, the processes that read the streams."""

    # -- the shard processes ---------------------------------------------------------------

    def _spec(self, link: ShardLink) -> bytes:
        return message("spec", index=link.index, **self._spec_base, **self._spec_fields(link))

    def _spec_fields(self, link: ShardLink) -> dict[str, Any]:
        """The spec's load: its ``plan`` and ``client`` (an open loop adds its schedule)."""
        n, k, plan = len(self.links), link.index, self.plan
        limit = plan.max_requests
        return {
            "plan": {
                "endpoints": list(shard_endpoints(plan.endpoints, n, k)),
                "concurrency": link.workers,
                "duration_s": None,  # the window is the coordinator's: it sends stop
                "max_requests": None if limit is None else share(limit, n, k),
                "drain_timeout_s": plan.drain_timeout_s,
                "barrier_timeout_s": plan.barrier_timeout_s,
                "request_id_prefix": plan.request_id_prefix,
                "backoff_max_s": plan.backoff_max_s,
            },
            "client": self._client_spec,
        }

    async def launch_shard(self, link: ShardLink) -> ShardProcess:
        """Start shard ``link.index`` (``launcher``'s job; a subclass may override)."""
        return await self.launcher(link, self._env)

    async def _spawn_shard(self, link: ShardLink) -> None:
        proc = link.proc = await self.launch_shard(link)
        assert proc.stdin is not None
        proc.stdin.write(self._spec(link))  # headers on a pipe: never argv, never disk
        link.status = "running"
        self.tasks.append(asyncio.create_task(self._follow(link), name=f"shard-{link.index}"))
        self._sink.state.events.emit(
            "shard", f"shard {link.index} started", "info", shard=link.index, pid=proc.pid
        )

    def _send_line(self, link: ShardLink, line: bytes) -> None:
        proc = link.proc
        if proc is None or proc.stdin is None or link.status != "running":
            return
        with contextlib.suppress(ConnectionError, RuntimeError):  # it just exited
            proc.stdin.write(line)

    def _send_all(self, kind: str, **body: Any) -> None:
        line = message(kind, **body)
        for link in self.links:
            self._send_line(link, line)

    async def _follow(self, link: ShardLink) -> None:
        """Read one shard's lines until it exits; then its fate (done or lost)."""
        proc = link.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        name = shard_name(link.index, len(self.links))
        logs = asyncio.create_task(copy_shard_log(name, proc.stderr))
        on_result, n = self._result_sink(), link.index
        try:
            async for line in proc.stdout:
                got = parse_line(line)
                if isinstance(got, RequestResult):
                    link.requests += 1
                    if link.clock_offset_ns:  # another host's clock (0 here: nothing to do)
                        shift_result(got, link.clock_offset_ns)
                    on_result(got, shard=n)
                else:
                    self._on_status(link, got)
        except Exception as e:  # a broken line (or a bug here): the shard is lost, named
            traceback.print_exc()  # into runner.log
            self._sink.state.internal_errors.append(f"{name}: {type(e).__name__}: {e}"[:300])
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        link.exit_code = await proc.wait()
        # Whatever the copy met, the drain must see this shard's end (a follower that
        # died here left the drain waiting for ever).
        await asyncio.gather(logs, return_exceptions=True)
        if link.done is None:
            self._lost(link)
        else:
            link.status = "done"
        link.finished.set()
        self._check_issue_end()

    def _result_sink(self) -> Callable[..., None]:
        """What each result received goes to: the journal (an open loop adds its peak)."""
        return self._sink.on_result

    def _on_status(self, link: ShardLink, msg: dict[str, Any]) -> None:
        kind = msg["t"]
        if kind == "ready":
            link.ready = msg
            self._merge_counts()
            if all(lk.ready is not None or lk.status == "lost" for lk in self.links):
                self._all_ready.set()
        elif kind == "released":
            link.released_ns = link.reported_ns(msg.get("ns"))
        elif kind == "release_end":
            self._release_ended(link, msg)
        elif kind == "hb":
            link.beat = msg
            self._merge_counts()
            add_reads(self._read_tally, link, msg)
            add_lag(link, msg)
        elif kind == "issue_end":
            link.issue_ended = True
            link.issue_reason = msg.get("reason")
            self._check_issue_end()
        elif kind == "done":
            link.done = link.beat = msg
            link.issue_ended = True
            if link.released_ns is None:
                link.released_ns = link.reported_ns(msg.get("released_ns"))
            self._merge_counts()
            add_reads(self._read_tally, link, msg)
            add_lag(link, msg)

    def _release_ended(self, link: ShardLink, msg: dict[str, Any]) -> None:
        """A shard let its last worker go: a release of more than one loop turn is an
        event naming the shard (:mod:`loadgen.release`)."""
        turns, ended = msg.get("turns"), link.reported_ns(msg.get("ns"))
        if not isinstance(turns, int) or turns < 2 or ended is None or link.released_ns is None:
            return
        spread_s = (ended - link.released_ns) / 1e9
        workers = int((link.ready or {}).get("workers_started", link.workers))
        self._sink.state.events.emit(
            "shard",
            f"{shard_name(link.index, len(self.links))}: "
            + release_words(workers, turns, spread_s),
            shard=link.index,
            release_s=round(spread_s, 4),
            release_turns=turns,
        )

    def _check_issue_end(self) -> None:
        if all(lk.issue_ended or lk.status == "lost" for lk in self.links):
            self._events_ended.set()

    def _merge_counts(self) -> None:
        """The run's live counters: the sums of the shards' last reports."""
        gs, links = self.state, self.links
        gs.workers_started = sum(
            int((lk.done or lk.ready or {}).get("workers_started", 0)) for lk in links
        )
        gs.in_flight = sum(int(lk.beat.get("in_flight", 0)) for lk in links if lk.done is None)
        gs.issued = sum(int(lk.beat.get("issued", 0)) for lk in links)
        gs.cancelled = sum(int(lk.beat.get("cancelled", 0)) for lk in links)
        gs.backoffs = sum(int(lk.beat.get("backoffs", 0)) for lk in links)

    def _lost(self, link: ShardLink) -> None:
        """A shard that exited before ``done``: named, and the others stop gracefully."""
        st = self._sink.state
        link.status = "lost"
        link.lost_at_s = round(st.now_s(), 3)
        link.in_flight_at_loss = int(link.beat.get("in_flight", 0)) if link.beat else None
        words = lost_words(link, len(self.links))
        st.events.emit("shard", words, "error", shard=link.index, exit_code=link.exit_code)
        if link.ready is None:  # before the barrier: its workers never started
            self.state.start_failures[f"shard {link.index} lost before it was ready"] += (
                link.workers
            )
            if all(lk.ready is not None or lk.status == "lost" for lk in self.links):
                self._all_ready.set()
        elif self.state.barrier_released_ns is not None:
            self.stop_issuing(f"{shard_name(link.index, len(self.links))} lost")

    # -- barrier ---------------------------------------------------------------------------

    async def start_workers(self) -> bool:
        """Start every shard and wait until each has every worker up (or the barrier times
        out). True when all ``concurrency`` workers started, across the shards."""
        await asyncio.gather(*(self._spawn_shard(lk) for lk in self.links))
        ready = asyncio.ensure_future(self._all_ready.wait())
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait(
            {ready, stop},
            timeout=self.plan.barrier_timeout_s + SPAWN_GRACE_S,
            return_when=asyncio.FIRST_COMPLETED,
        )
        ready.cancel()
        stop.cancel()
        now = time.perf_counter_ns()
        for link in self.links:
            if link.ready is None:
                if link.status != "lost" and not self._stop.is_set():
                    self.state.start_failures[
                        f"shard {link.index} not ready before the barrier timeout"
                    ] += link.workers
                continue
            for why, count in link.ready.get("failures", {}).items():
                self.state.start_failures[f"shard {link.index}: {why}"] += int(count)
            if link.from_shard(int(link.ready["clock_ns"])) > now:  # one clock, or offset
                self.state.start_failures[
                    f"shard {link.index}: its monotonic clock is ahead of the coordinator's"
                ] += link.workers
        self._merge_counts()
        started = all(lk.ready is not None and lk.status == "running" for lk in self.links)
        return (
            started
            and self.state.workers_started == self.plan.concurrency
            and not any("clock" in why for why in self.state.start_failures)
        )

    # -- issue window and drain ------------------------------------------------------------

    async def run(self) -> None:
        """Release every shard at once, close the window for all of them, await drains."""
        t0 = self.state.barrier_released_ns = self._clock_ns()
        self._release.set()
        for link in self.links:  # the schedule's origin, on each shard's clock
            self._send_line(link, message("release", t0=link.to_shard(t0)))
        waiters: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(self._stop.wait()),
            asyncio.ensure_future(self._events_ended.wait()),
        }
        if self.plan.duration_s is not None:
            waiters.add(asyncio.ensure_future(self._issue_window(self.plan.duration_s)))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        if not self._stop.is_set():
            reasons = {lk.issue_reason for lk in self.links if lk.issue_ended}
            own = next(iter(reasons)) if len(reasons) == 1 and self._events_ended.is_set() else None
            self.stop_issuing(str(own or "issue window complete"))
        self.state.issue_ended_ns = self._clock_ns()
        if self.on_issue_end is not None:
            self.on_issue_end()
        await self._drain_shards()
        self.state.drain_ended_ns = self._clock_ns()
        self._final_counts()

    async def _drain_shards(self) -> None:
        finished = [asyncio.ensure_future(lk.finished.wait()) for lk in self.links]
        _, pending = await asyncio.wait(finished, timeout=self.plan.drain_timeout_s + DONE_GRACE_S)
        if pending:  # each shard keeps the drain deadline itself: this one did not
            self.abort()
            await asyncio.wait(pending, timeout=KILL_AFTER_S)
            self._kill_remaining()
            await asyncio.gather(*pending, return_exceptions=True)

    def _kill_remaining(self) -> None:
        for link in self.links:
            if link.proc is not None and link.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    link.proc.kill()

    def _final_counts(self) -> None:
        gs = self.state
        self._merge_counts()
        for link in self.links:
            done = link.done or {}
            for why, count in done.get("worker_errors", {}).items():
                gs.worker_errors[f"shard {link.index}: {why}"] += int(count)
            if gs.cancel_cause is None and done.get("cancel_cause"):
                gs.cancel_cause = str(done["cancel_cause"])
        gs.requested = sum(int((lk.done or {}).get("requested", lk.workers)) for lk in self.links)

    def stop_issuing(self, reason: str) -> None:
        """Graceful stop of every shard: no new requests; in-flight ones finish."""
        if not self._stop.is_set():
            super().stop_issuing(reason)
            self._send_all("stop", reason=reason)

    def abort(self) -> None:
        """Every shard cuts its in-flight requests now (journaled as cancelled); a shard
        that does not exit soon after is killed."""
        self.stop_issuing(self.state.stop_reason or "abort")
        if self.state.cancel_cause is None:
            self.state.cancel_cause = "abort"
        self._release.set()
        self._send_all("abort")
        with contextlib.suppress(RuntimeError):  # no loop: nothing runs to kill
            asyncio.get_running_loop().call_later(KILL_AFTER_S, self._kill_remaining)

    async def cancel_unstarted(self) -> None:
        """Tear the shards down when the barrier failed (no load is issued)."""
        self._stop.set()
        self._send_all("cancel")
        finished = [asyncio.ensure_future(lk.finished.wait()) for lk in self.links]
        _, pending = await asyncio.wait(finished, timeout=KILL_AFTER_S)
        if pending:
            self._kill_remaining()
            await asyncio.gather(*pending, return_exceptions=True)

    # -- live control ----------------------------------------------------------------------

    def pause(self) -> None:
        """Every shard stops issuing until :meth:`resume`."""
        super().pause()
        self._send_all("pause")

    def resume(self) -> None:
        """Every shard issues again."""
        super().resume()
        self._send_all("resume")

    def set_concurrency(self, n: int) -> None:
        """The run's workers below ``n`` issue: shard ``k`` lets :func:`share` of them."""
        if n < 0:
            raise ValueError(f"concurrency must be 0 or more, not {n}")
        if n > self._max_concurrency:
            raise ValueError(
                f"concurrency {n}: at most {self._max_concurrency}, the connections this "
                "run's shards pool (more workers would wait for a connection, and that "
                "wait would count as the server's latency)"
            )
        self._target = n
        self.state.target = n
        if self._release.is_set() and not self._stop.is_set() and n > self.state.requested:
            self.state.requested = n
        for link in self.links:
            self._send_line(link, message("set", n=share(n, len(self.links), link.index)))

    @property
    def max_concurrency(self) -> int | None:
        """The most workers the shards' clients can serve at once."""
        return getattr(self, "_max_concurrency", None)

    @property
    def step(self) -> int | None:
        """The load step now running (each shard stamps it on its requests)."""
        return self._step

    @step.setter
    def step(self, value: int | None) -> None:
        self._step = value
        self._send_all("step", step=value)

    # -- the record ------------------------------------------------------------------------

    def shard_infos(self, redact_host: str = "local") -> list[ShardInfo]:
        """Each shard as the record lists it (:func:`~soak.run.shard_reports.shard_infos`)."""
        return shard_infos(self.links, self.state.barrier_released_ns, redact_host)


def sharded_generator(
    cfg: RunConfig,
    plan: LoadPlan,
    client: StreamingClient,
    pool: PromptPool,
    bodies: BodyBuilder,
    sink: RequestSink,
    headers: Mapping[str, str],
) -> ShardedGenerator:
    """The coordinator's generator for ``cfg.shards`` shards: each builds its own client
    from these keywords (the run's, with the pool sized for the largest shard's workers
    and their live raise, as the single process sizes its own)."""
    if cfg.arrival != "closed":
        from soak.run.shards_open import sharded_open_loop  # it imports this module

        return sharded_open_loop(cfg, plan, client, pool, bodies, sink, headers)
    client_spec = {
        "max_connections": live_connections(share(plan.concurrency, cfg.shards, 0)),
        "connect_timeout_s": cfg.connect_timeout_s,
        "read_timeout_s": cfg.read_timeout_s,
        "headers": dict(headers),
        "tls": TlsFiles.of(cfg).spec(),  # paths only: each shard reads the files
        "sanity_checks": cfg.sanity_checks,
        "ignore_eos": cfg.ignore_eos,
    }
    return ShardedGenerator(
        plan, client, pool, bodies, sink, cfg.shards, client_spec,
        secret_vars=secret_vars(cfg.headers, cfg.api_key_env),
    )  # fmt: skip


def record_shards(gen: LoadGenerator | None) -> list[ShardInfo]:
    """The record's ``shards`` (empty, and absent from the record, for a run in one
    process)."""
    if not isinstance(gen, ShardedGenerator):
        return []
    annotate = getattr(gen.launcher, "annotate", None)  # --ray: hosts, clocks, journals
    return annotate(gen.shard_infos()) if annotate is not None else gen.shard_infos()
