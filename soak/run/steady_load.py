"""The steady load phase: barrier → load → drain at a fixed concurrency (DESIGN.md §1).

One of the two load plans a run can have (the other is the matrix profile,
:mod:`soak.run.matrix_run`). It starts every worker behind a barrier, releases them
together once all are up, issues for the configured time or count, drains, and takes the
engine's counters at the window's edges for the reconciliation. A canary round of the
contract gates runs on its interval meanwhile, when asked for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.arrivals import RateCurve, arrival_offsets, curve_draws, curve_offsets
from loadgen.client import StreamClient
from loadgen.conversation import ConversationGenerator
from loadgen.open_loop import WARM_CONNECTIONS_MAX, OpenLoopGenerator, in_spans, paused_spans
from loadgen.open_loop_sessions import OpenLoopSessionGenerator
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.release import release_words
from loadgen.workers import LoadGenerator, LoadPlan
from probes.host import raise_fd_limit
from soak.record.summary import LoadTiming
from soak.run import trace_setup
from soak.run.config import RunConfig
from soak.run.config_arrival import default_max_in_flight
from soak.run.heap_policy import LoadHeap
from soak.run.load_source import request_source
from soak.run.load_steps import LoadSteps, step_curve
from soak.run.mix_setup import mix_contracts
from soak.run.request_sink import RequestSink
from soak.run.snapshots import now_iso
from soak.run.state import RunParts, RunState
from soak.run.stops import RunControls


class SteadyLoad:
    """One steady load against the run's endpoints; results go to the request sink."""

    def __init__(
        self,
        parts: RunParts,
        sink: RequestSink,
        controls: RunControls,
        headers: dict[str, str],
    ) -> None:
        self.parts = parts
        self.sink = sink
        self.controls = controls
        self.headers = headers
        self.steps: LoadSteps | None = None
        """The step driver once the barrier released (finalize reads its counters)."""

    def _plan(self) -> tuple[LoadPlan, BodyBuilder]:
        st, cfg = self.parts.state, self.parts.state.config
        plan = LoadPlan(
            endpoints=tuple(cfg.endpoints),
            # Open loop: the connections warmed behind the barrier, not workers.
            concurrency=cfg.concurrency
            if (cap := in_flight_cap(cfg)) is None
            else min(cap, WARM_CONNECTIONS_MAX),
            duration_s=cfg.duration_s,
            max_requests=cfg.max_requests,
            drain_timeout_s=cfg.drain_timeout_s,
            barrier_timeout_s=cfg.barrier_timeout_s,
            request_id_prefix=f"{st.run_id}/load/{cfg.api}",
            backoff_max_s=cfg.failure_backoff_max_s,
        )
        bodies = BodyBuilder(
            model=cfg.model,
            api=cfg.api,
            max_tokens=cfg.max_tokens,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
            extra=cfg.body_extra(),  # reasoning_effort too: "every load request"
            max_tokens_field=cfg.max_tokens_field,
        )
        return plan, bodies

    async def run(self) -> None:
        """Barrier, load and drain; the generator stays in the state for the record."""
        st, cfg = self.parts.state, self.parts.state.config
        assert st.pool is not None
        cap = in_flight_cap(cfg)
        # A closed loop may be raised live (+, soaktop control) to twice its concurrency:
        # the pool is a cap, not sockets opened, and a worker must never wait for one.
        sockets = live_connections(cfg.concurrency) if cap is None else cap
        before, after = raise_fd_limit(sockets + 256)
        if after > before:
            st.events.emit("warning", f"raised the open-files limit {before} → {after}")
        plan, bodies = self._plan()
        what = "workers" if cap is None else "warm connections"
        st.enter("barrier", f"starting {plan.concurrency} {what}")
        async with StreamClient(
            max_connections=sockets + 16 if cap is not None else sockets,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            headers=self.headers,
            sanity_checks=cfg.sanity_checks,
            ignore_eos=cfg.ignore_eos,
            contracts=mix_contracts(cfg),  # a mix's classes that check their answers
        ) as client:
            gen = make_generator(
                cfg, plan, client, st.pool, bodies, self.sink, st.class_pools, self.headers
            )
            gen.on_issue_end = self._on_issue_end
            gen.on_release_end = self._on_release_end
            st.gen = gen
            t_barrier = time.perf_counter_ns()
            all_started = await gen.start_workers()
            gs = gen.state
            wait_s = st.barrier_wait_s = (time.perf_counter_ns() - t_barrier) / 1e9
            st.events.emit(
                "barrier",
                f"{gs.workers_started}/{plan.concurrency} {what} started in {wait_s:.2f} s",
                "info" if all_started else "error",
                **self._barrier_data(gen),
            )
            if all_started and st.stop_asked is None:
                await self._released(gen)
            else:
                await gen.cancel_unstarted()

    async def _released(self, gen: LoadGenerator) -> None:  # or its open-loop subclass
        """From the barrier's release to the end of the drain, under the load's policy
        for the garbage collector (:mod:`soak.run.heap_policy`: no full collection
        walks the start-up's objects while the load is measured)."""
        heap = LoadHeap()
        try:
            await heap.settle()
            await self._load_window(gen)
        finally:
            heap.close()

    async def _load_window(self, gen: LoadGenerator) -> None:
        """The load window opened, the load issued and drained."""
        p, st, cfg = self.parts, self.parts.state, self.parts.state.config
        engines = p.watchers.engines
        st.released_at = now_iso()
        if engines is not None:  # the server's counters as the window opens
            st.counters_before = await engines.scrape_all()
            engines.tracking = True
        p.lag.take_interval(keep=False)  # barrier start-up lag is not load lag
        pace = "" if cfg.rate is None else f" at {cfg.rate:g} req/s ({cfg.arrival})"
        issuing = f"issuing for {cfg.duration_s} s{pace}"
        if cfg.arrival == "trace":
            issuing = trace_setup.replay_words(cfg)  # "replaying <format> trace ..."
        st.enter("load", f"barrier released: {issuing}")
        p.window.open(st.now_s())
        canary: asyncio.Task[None] | None = None
        if p.gates is not None and cfg.canary_interval_s:
            canary = asyncio.create_task(
                p.gates.canary_loop(
                    cfg.canary_interval_s, cfg.canary_tasks, self.controls.canary_stop
                )
            )
            self.controls.cancel_on_abort.add(canary)
        steps = self.steps = LoadSteps(st, gen)  # stages, a sweep, live changes
        steps.prime()
        self.controls.steps = steps
        # Next loop turn: gen.run has set the release time, no worker has sent yet.
        asyncio.get_running_loop().call_soon(steps.start)
        await gen.run()
        self.controls.steps = None
        await steps.finish()
        p.window.close(st.now_s())  # the drain is over
        if canary is not None:
            # A round in flight finishes (its requests are in the counters) unless an
            # abort cancels it, now or while we wait.
            self.controls.canary_stop.set()
            if st.hard_stop:
                canary.cancel()
            await asyncio.gather(canary, return_exceptions=True)
            self.controls.cancel_on_abort.discard(canary)
        if engines is not None:
            engines.tracking = False
            st.counters_after = await engines.settled_counters()
            engines.close_window()

    def _on_release_end(self) -> None:
        """A release that took more than one loop turn says how long its workers took to
        be let go (:mod:`loadgen.release`): the load was not whole at the window's first
        instant. Data as the barrier event's, so ``recover`` reads either."""
        st, gen = self.parts.state, self.parts.state.gen
        if gen is None or (gs := gen.state).release_turns < 2:
            return
        assert gs.barrier_released_ns is not None and gs.release_ended_ns is not None
        spread_s = (gs.release_ended_ns - gs.barrier_released_ns) / 1e9
        st.events.emit(
            "barrier",
            release_words(gs.workers_started, gs.release_turns, spread_s),
            **self._barrier_data(gen),
            release_s=round(spread_s, 4),
            release_turns=gs.release_turns,
        )

    def _barrier_data(self, gen: LoadGenerator) -> dict[str, Any]:
        """A ``barrier`` event's data (``BarrierData``: what ``recover`` reads back)."""
        gs, scrub = gen.state, self.parts.state.redactor.text
        return {
            "workers_started": gs.workers_started,
            "requested": gen.plan.concurrency,
            "failures": {scrub(k): n for k, n in gs.start_failures.items()},
        }

    def _on_issue_end(self) -> None:
        gen = self.parts.state.gen
        if gen is not None and gen.paused:
            gen.resume()  # stop is set: the workers wake only to leave
        self.controls.canary_stop.set()  # no canary round starts during the drain
        self.parts.state.enter("drain", "issue window closed; draining")


def live_connections(concurrency: int) -> int:
    """The closed loop's pooled connections: room for a live raise to twice the
    concurrency, or 16 more (``set_concurrency`` refuses more than the client pools)."""
    return max(2 * concurrency, concurrency + 16)


def in_flight_cap(cfg: RunConfig) -> int | None:
    """The open loop's cap on requests in flight (None: the closed loop)."""
    if cfg.arrival == "trace":
        return trace_setup.in_flight_cap(cfg)
    if cfg.arrival == "closed" or cfg.rate is None:
        return None
    if cfg.max_in_flight is not None:
        return cfg.max_in_flight
    # Sessions: each arrival brings up to `turns` requests, so the default has room for them.
    return default_max_in_flight(cfg.rate * cfg.turns)


def arrival_seed(cfg: RunConfig) -> int:
    """The schedule's seed: ``arrival_seed``, else the pool's (one seed, one run)."""
    return cfg.arrival_seed if cfg.arrival_seed is not None else cfg.pool_seed


def make_generator(
    cfg: RunConfig,
    plan: LoadPlan,
    client: StreamClient,
    pool: PromptPool,
    bodies: BodyBuilder,
    sink: RequestSink,
    class_pools: Mapping[str, PromptPool] | None = None,
    headers: Mapping[str, str] | None = None,
) -> LoadGenerator:
    """The closed loop's workers, or the open loop's scheduler (same interface), each
    running sessions with ``--turns`` (an open loop's arrivals start them);
    ``class_pools``: a mix's classes' own pools (``RunState.class_pools``). With
    ``--shards N`` the closed loop runs in N shard processes (:mod:`soak.run.shards`;
    ``headers`` go to them on a pipe)."""
    if cfg.shards > 1:
        from soak.run.shards import sharded_generator  # it imports this module

        sharded = sharded_generator(cfg, plan, client, pool, bodies, sink, headers or {})
        if sink.state.shard_launcher is not None:  # --ray: the hosts reserved at preflight
            sharded.launcher = sink.state.shard_launcher
        return sharded
    cap = in_flight_cap(cfg)
    think_s = cfg.think_time_s or 0.0
    if cfg.turns > 1 and (cfg.arrival == "closed" or cfg.rate is None or cap is None):
        return ConversationGenerator(
            plan, client, pool, bodies, sink.on_result, turns=cfg.turns, think_time_s=think_s
        )
    source = request_source(cfg, pool, bodies, class_pools)
    if cfg.arrival == "trace":  # the trace's own times; the window ends with the trace
        return trace_setup.trace_generator(cfg, plan, client, pool, bodies, sink.on_result, source)
    if cfg.arrival == "closed" or cfg.rate is None or cap is None:
        return LoadGenerator(plan, client, pool, bodies, sink.on_result, source=source)
    # A rate curve (a constant one gives the plain schedule's times exactly): the steps'
    # rates, and what a live `set` changes (soak.run.load_steps).
    curve = step_curve(cfg) or RateCurve(points=[(0.0, cfg.rate)])
    offsets = curve_draws(cfg.arrival, curve, cfg.burstiness, arrival_seed(cfg))
    if cfg.turns > 1:  # each arrival starts a session (loadgen.open_loop_sessions)
        return OpenLoopSessionGenerator(
            plan, client, pool, bodies, sink.on_result, offsets, cap,
            turns=cfg.turns, think_time_s=think_s, curve=curve,
        )  # fmt: skip
    return OpenLoopGenerator(
        plan, client, pool, bodies, sink.on_result, offsets, cap, source=source, curve=curve
    )


def load_timing(st: RunState) -> LoadTiming | None:
    """The load's timing from the generator's state (None if no worker was started,
    and for the matrix profile, whose figures are per cell and repetition)."""
    if st.gen is None or st.config.matrix:
        return None
    gs = st.gen.state
    scrub = st.redactor.text

    def rel(ns: int | None) -> float | None:
        return None if ns is None else (ns - st.origin_ns) / 1e9

    open_loop = isinstance(st.gen, OpenLoopGenerator)
    end = rel(gs.issue_ended_ns)
    start = judged_start_s(st, rel(gs.barrier_released_ns), end)
    return LoadTiming(
        requested_concurrency=st.gen.plan.concurrency,
        workers_started=gs.workers_started,
        barrier_released=gs.barrier_released_ns is not None,
        worker_start_failures={scrub(k): n for k, n in gs.start_failures.items()},
        barrier_released_at=st.released_at,
        barrier_wait_s=st.barrier_wait_s,
        issue_start_s=start,
        issue_end_s=end,
        drain_end_s=rel(gs.drain_ended_ns),
        issued=gs.issued - (st.warmup.journaled if st.warmup is not None else 0),
        stop_reason=gs.stop_reason,
        cancel_cause=gs.cancel_cause,
        backoffs=gs.backoffs,
        worker_errors={scrub(k): n for k, n in gs.worker_errors.items()},
        sanity_checked=st.config.sanity_checks,
        offered_rate=offered_rate(
            st.config,
            rel(gs.barrier_released_ns),
            start,
            end,
            getattr(st.gen, "curve", None),
            paused_spans(st.gen),
        )
        if open_loop
        else None,
        held_by_cap=getattr(gs, "held_by_cap", 0),
    )


def offered_rate(
    cfg: RunConfig,
    released_s: float | None,
    start_s: float | None,
    end_s: float | None,
    curve: RateCurve | None = None,
    paused: Sequence[tuple[float, float]] = (),
) -> float | None:
    """What the schedule offered in the judged window, requests/s: its arrivals there
    (the same seeded schedule, drawn again; under ``curve``, the generator's rate curve
    with every step and live change) ÷ the window. Not ``--rate`` itself: a Poisson
    count over a short window strays from its mean by chance, and the client is judged
    against the schedule it was given, not against the mean of all schedules. Arrivals
    inside an operator's pause (``paused``: spans in seconds from the release) were
    withheld, not offered: they are not counted."""
    if released_s is None or start_s is None or end_s is None or end_s <= start_s:
        return None
    lo, hi = start_s - released_s, end_s - released_s
    if cfg.arrival == "trace":
        return trace_setup.offered_rate(cfg, lo, hi, paused)
    if cfg.arrival == "closed" or cfg.rate is None:
        return None
    seed = arrival_seed(cfg)
    count = 0
    schedule = (
        arrival_offsets(cfg.arrival, cfg.rate, cfg.burstiness, seed)
        if curve is None
        else curve_offsets(cfg.arrival, curve, cfg.burstiness, seed)
    )
    for offset in schedule:
        if offset >= hi:
            break
        count += offset >= lo and not in_spans(offset, paused)
    return count / (end_s - start_s)


def judged_start_s(
    st: RunState, released_s: float | None, issue_end_s: float | None
) -> float | None:
    """Where the judged issue window begins: the barrier's release, or the warm-up's end
    (its requests are journaled as ``warmup`` and left out; a warm-up that outlasted the
    issue window leaves a judged window of no length)."""
    wc = st.warmup
    if wc is None or released_s is None:
        return released_s
    end = None if wc.end_ns is None else (wc.end_ns - st.origin_ns) / 1e9
    if end is None or (issue_end_s is not None and end > issue_end_s):
        return issue_end_s if issue_end_s is not None else released_s
    return end
