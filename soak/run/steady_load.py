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

from loadgen.client import StreamClient
from loadgen.prompts import BodyBuilder
from loadgen.workers import LoadGenerator, LoadPlan
from probes.host import raise_fd_limit
from soak.record.summary import LoadTiming
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

    def _plan(self) -> tuple[LoadPlan, BodyBuilder]:
        st, cfg = self.parts.state, self.parts.state.config
        plan = LoadPlan(
            endpoints=tuple(cfg.endpoints),
            concurrency=cfg.concurrency,
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
        )
        return plan, bodies

    async def run(self) -> None:
        """Barrier, load and drain; the generator stays in the state for the record."""
        st, cfg = self.parts.state, self.parts.state.config
        assert st.pool is not None
        before, after = raise_fd_limit(cfg.concurrency + 256)
        if after > before:
            st.events.emit("warning", f"raised the open-files limit {before} → {after}")
        st.enter("barrier", f"starting {cfg.concurrency} workers")
        plan, bodies = self._plan()
        async with StreamClient(
            max_connections=cfg.concurrency + 16,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            headers=self.headers,
            sanity_checks=cfg.sanity_checks,
            ignore_eos=cfg.ignore_eos,
        ) as client:
            gen = LoadGenerator(plan, client, st.pool, bodies, self.sink.on_result)
            gen.on_issue_end = self._on_issue_end
            st.gen = gen
            t_barrier = time.perf_counter_ns()
            all_started = await gen.start_workers()
            gs = gen.state
            wait_s = st.barrier_wait_s = (time.perf_counter_ns() - t_barrier) / 1e9
            st.events.emit(
                "barrier",
                f"{gs.workers_started}/{cfg.concurrency} workers started in {wait_s:.2f} s",
                "info" if all_started else "error",
                workers_started=gs.workers_started,
                requested=cfg.concurrency,
                failures={st.redactor.text(k): n for k, n in gs.start_failures.items()},
            )
            if all_started and st.stop_asked is None:
                await self._released(gen)
            else:
                await gen.cancel_unstarted()

    async def _released(self, gen: LoadGenerator) -> None:
        """From the barrier's release to the end of the drain."""
        p, st, cfg = self.parts, self.parts.state, self.parts.state.config
        engines = p.watchers.engines
        st.released_at = now_iso()
        if engines is not None:  # the server's counters as the window opens
            st.counters_before = await engines.scrape_all()
            engines.tracking = True
        p.lag.take_interval(keep=False)  # barrier start-up lag is not load lag
        st.enter("load", f"barrier released: issuing for {cfg.duration_s} s")
        p.window.open(st.now_s())
        canary: asyncio.Task[None] | None = None
        if p.gates is not None and cfg.canary_interval_s:
            canary = asyncio.create_task(
                p.gates.canary_loop(
                    cfg.canary_interval_s, cfg.canary_tasks, self.controls.canary_stop
                )
            )
            self.controls.cancel_on_abort.add(canary)
        await gen.run()
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

    def _on_issue_end(self) -> None:
        gen = self.parts.state.gen
        if gen is not None and gen.paused:
            gen.resume()  # stop is set: the workers wake only to leave
        self.controls.canary_stop.set()  # no canary round starts during the drain
        self.parts.state.enter("drain", "issue window closed; draining")


def load_timing(st: RunState) -> LoadTiming | None:
    """The load's timing from the generator's state (None if no worker was started,
    and for the matrix profile, whose figures are per cell and repetition)."""
    if st.gen is None or st.config.matrix:
        return None
    gs = st.gen.state
    scrub = st.redactor.text

    def rel(ns: int | None) -> float | None:
        return None if ns is None else (ns - st.origin_ns) / 1e9

    return LoadTiming(
        requested_concurrency=st.config.concurrency,
        workers_started=gs.workers_started,
        barrier_released=gs.barrier_released_ns is not None,
        worker_start_failures={scrub(k): n for k, n in gs.start_failures.items()},
        barrier_released_at=st.released_at,
        barrier_wait_s=st.barrier_wait_s,
        issue_start_s=judged_start_s(st, rel(gs.barrier_released_ns), rel(gs.issue_ended_ns)),
        issue_end_s=rel(gs.issue_ended_ns),
        drain_end_s=rel(gs.drain_ended_ns),
        issued=gs.issued - (st.warmup.journaled if st.warmup is not None else 0),
        stop_reason=gs.stop_reason,
        cancel_cause=gs.cancel_cause,
        backoffs=gs.backoffs,
        worker_errors={scrub(k): n for k, n in gs.worker_errors.items()},
        sanity_checked=st.config.sanity_checks,
    )


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
