"""The step driver: a load whose target changes while it runs (issue 16 §1 stages, §3, §4).

:class:`LoadSteps` moves the generator from step to step and keeps the run's steps
(``RunState.steps``) current: each :class:`~soak.record.models.LoadStep` is appended as it
begins (the previous one's ``end_s`` set), an event ``step`` carries its dict, and the
generator's ``step`` is set at the boundary, so every request journaled carries the step
it was sent in. Three sources of steps:

- ``--stages``: the open loop's rate curve is built before the barrier (the generator
  follows it: :func:`stage_curve`); the closed loop parks and wakes workers as the ramp's
  line crosses each whole number (k6's ramping-vus: worker ``n`` starts when the line
  reaches ``n``);
- ``--sweep``: a constant target per step, switched at each boundary;
- a live change (:meth:`LoadSteps.change`: ``control.jsonl``'s ``set``, the monitor's
  keys): applied at once, a step of origin ``live``. It ends the plan: the remaining
  planned steps are dropped (an event says so), the load holds the new target until the
  window ends. A run with no plan gets its first step (``start``: the load before any
  change) when the first change comes; its journal lines carry no ``step`` and count as
  step 0 (:mod:`soak.record.step_figures`).

The driver runs on the measuring loop and only sleeps to the next boundary: no file
reads, no parsing after the barrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from loadgen.arrivals import ARRIVAL_MODELS, RateCurve, curve_offsets
from loadgen.open_loop import OpenLoopGenerator, in_spans, paused_spans
from loadgen.workers import LoadGenerator
from soak.record.models import LoadStep
from soak.record.step_figures import BOUNDARY_S, StepCounts, in_span, judged_span
from soak.record.summary import LoadTiming
from soak.run.config import RunConfig
from soak.run.config_arrival import MAX_RATE
from soak.run.config_steps import MAX_CONCURRENCY, PlannedStep, planned_steps
from soak.run.state import RunState

StepOrigin = Literal["stage", "sweep", "live"]


@dataclass
class StepMark:
    """The generator's cumulative counters as a step began (a step's own are the next
    mark's minus its own)."""

    held_by_cap: int
    backoffs: int


def step_curve(cfg: RunConfig) -> RateCurve | None:
    """The open loop's rate curve of its planned steps, points ``(t, rate)`` from the
    window's start: the stages' ramps (from rate 0 at t 0), or the sweep's steps (two
    points at each boundary); None when the run plans no rates."""
    plan = planned_steps(cfg)
    if not plan or plan[0].kind != "rate":
        return None
    points: list[tuple[float, float]] = []
    for p in plan:
        points += [(p.offset_s, p.start), (p.offset_s + p.duration_s, p.end)]
    return RateCurve(points=points)


class LoadSteps:
    """Drives and records one steady load's steps (see the module docstring)."""

    def __init__(self, state: RunState, gen: LoadGenerator) -> None:
        self.state = state
        self.gen = gen
        self.plan: list[PlannedStep] = planned_steps(state.config)
        self.open_loop = isinstance(gen, OpenLoopGenerator)
        self.marks: list[StepMark] = []
        self._task: asyncio.Task[None] | None = None
        self._planned = bool(self.plan)
        """False once a live change ended the plan (or there was none)."""

    # -- before the release ----------------------------------------------------------------

    def prime(self) -> None:
        """Set the load's starting target and step before the barrier releases."""
        if not self.plan:
            return
        self.gen.step = 0
        first = self.plan[0]
        if first.kind == "concurrency":  # an open loop's rates are its curve's
            self.gen.set_concurrency(math.floor(first.start))

    def start(self) -> None:
        """Begin the steps at the barrier's release (``gen.run`` has set it): step 0 is
        appended, the rest follow on a task of their own."""
        if not self.plan:
            return
        self._begin(self.plan[0], self._release_ns())
        self._task = asyncio.create_task(self._drive(), name="load-steps")

    # -- the plan ----------------------------------------------------------------------------

    def _release_ns(self) -> int:
        released = self.gen.state.barrier_released_ns
        assert released is not None, "steps start once the barrier has released"
        return released

    async def _drive(self) -> None:
        """Sleep to each boundary (and, for a closed ramp, each worker's turn)."""
        released = self._release_ns()
        for i, step in enumerate(self.plan):
            if i > 0:
                due = released + int(step.offset_s * 1e9)
                await self._until(due)
                if not self._planned or self._issuing_over():
                    return
                # Open loop: the boundary is the curve's, to the nanosecond (its requests
                # belong to steps by intended time); closed: when the workers changed.
                self._begin(step, due if self.open_loop else time.perf_counter_ns())
            if step.kind == "concurrency" and step.start != step.end:
                start_ns = released + int(step.offset_s * 1e9)
                for at_s, n in ramp_changes(step):
                    await self._until(start_ns + int(at_s * 1e9))
                    if not self._planned or self._issuing_over():
                        return
                    self.gen.set_concurrency(n)

    def _issuing_over(self) -> bool:
        """The issue window closed (a stop, an abort, the request count) before the plan
        did: no step begins in the drain."""
        return self.gen.state.issue_ended_ns is not None

    async def _until(self, due_ns: int) -> None:
        """Sleep until ``due_ns`` on the monotonic clock (uvloop's timers may wake a
        millisecond early: topped up, as the issue window's own timer is)."""
        for _ in range(5):
            left = due_ns - time.perf_counter_ns()
            if left <= 0:
                return
            await asyncio.sleep(left / 1e9 + 0.0005)

    def _begin(self, step: PlannedStep, at_ns: int) -> None:
        """Open planned ``step`` at ``at_ns`` (perf_counter_ns)."""
        if step.kind == "concurrency":
            self.gen.set_concurrency(math.floor(step.start))
        rate = step.kind == "rate"
        self._append(
            LoadStep(
                index=len(self.state.steps),
                origin=step.origin,
                label=step.label,
                start_s=(at_ns - self.state.origin_ns) / 1e9,
                rate_start=step.start if rate else None,
                rate_end=step.end if rate else None,
                concurrency_start=None if rate else int(step.start),
                concurrency_end=None if rate else int(step.end),
                settle_s=step.settle_s,
            )
        )

    def _append(self, step: LoadStep) -> None:
        """Close the step before, append ``step``, stamp the generator, say it."""
        steps = self.state.steps
        if steps:
            steps[-1].end_s = step.start_s
        gs = self.gen.state
        self.marks.append(StepMark(getattr(gs, "held_by_cap", 0), gs.backoffs))
        steps.append(step)
        self.gen.step = step.index
        self.state.events.emit(
            "step", f"step {step.index}: {step.label}", step=step.model_dump(mode="json")
        )

    # -- live changes --------------------------------------------------------------------------

    def change(
        self,
        *,
        rate: float | None = None,
        concurrency: int | None = None,
        origin: StepOrigin = "live",
        note: str = "",
    ) -> str | None:
        """Change the load's target now: ``rate`` (open loop, requests/s) or ``concurrency``
        (closed loop, workers). Returns None when applied (a new step began), else why
        not in words (the caller emits it; nothing changed). Safe to call from the
        runner's loop at any time: outside the issue window, while issuing is paused and
        on a trace replay (its times are the trace's) it is refused."""
        why = self._refusal(rate, concurrency)
        if why is not None:
            return why
        now_ns = time.perf_counter_ns()
        start = None if self.state.steps else self._start_step()  # its target: the one before
        try:  # the generator's own bounds (the connections its client pools) have the last word
            if rate is not None:
                self._set_rate(rate)
            else:
                assert concurrency is not None
                self.gen.set_concurrency(concurrency)
        except ValueError as e:  # refused before anything changed, like _refusal's
            return str(e)
        if self._planned:
            self._planned = False
            left = len(self.plan) - len(self.state.steps)
            if left > 0:
                self.state.events.emit(
                    "step",
                    f"a live change ends the plan: {left} planned step{'s' * (left != 1)} not run",
                    "warning",
                )
        if start is not None:  # the load before the first change: step 0
            self._append(start)
        why_words = f" ({note})" if note else ""
        target = f"rate {rate:g} req/s" if rate is not None else f"concurrency {concurrency}"
        self._append(
            LoadStep(  # one of rate and concurrency is None: the other loop's target
                index=len(self.state.steps),
                origin=origin,
                label=f"live: {target}{why_words}",
                start_s=(now_ns - self.state.origin_ns) / 1e9,
                rate_start=rate,
                rate_end=rate,
                concurrency_start=concurrency,
                concurrency_end=concurrency,
            )
        )
        return None

    def _refusal(self, rate: float | None, concurrency: int | None) -> str | None:
        """Why a change cannot be applied (None: it can)."""
        gs = self.gen.state
        if gs.barrier_released_ns is None or gs.issue_ended_ns is not None:
            return "not issuing (a change applies inside the issue window only)"
        if self.gen.paused:  # a step begun in a pause would measure the pause
            return "issuing is paused: resume first, then change the load"
        if self.open_loop and getattr(self.gen, "curve", None) is None:
            return (
                "a trace replay sends at the trace's own times: neither its rate nor its "
                "concurrency can be changed live (--time-scale sets its pace)"
            )
        if (rate is None) == (concurrency is None):
            return "give one of rate (open loop) or concurrency (closed loop)"
        if self.open_loop and rate is None:
            return "this load is open loop: change its rate, not its concurrency"
        if not self.open_loop and concurrency is None:
            return "this load is closed loop: change its concurrency, not its rate"
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, int | float):
                return f"rate {rate!r} is not a number"
            if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
                return f"rate {rate!r}: allowed above 0 up to {MAX_RATE:,.0f} req/s"
        elif isinstance(concurrency, bool) or not isinstance(concurrency, int):
            return f"concurrency {concurrency!r} is not a whole number"
        elif not 0 <= concurrency <= MAX_CONCURRENCY:
            return f"concurrency {concurrency}: allowed 0 to {MAX_CONCURRENCY:,}"
        return None

    def _start_step(self) -> LoadStep:
        """Step 0 of a run without a plan: the load from the release to the first change."""
        start = (self._release_ns() - self.state.origin_ns) / 1e9
        if self.open_loop:
            rate = self._rate_now()
            return LoadStep(
                index=0,
                origin="live",
                label=f"start: rate {rate:g} req/s",
                start_s=start,
                rate_start=rate,
                rate_end=rate,
            )
        n = self.gen.concurrency_target
        return LoadStep(
            index=0,
            origin="live",
            label=f"start: concurrency {n}",
            start_s=start,
            concurrency_start=n,
            concurrency_end=n,
        )

    def _rate_now(self) -> float:
        rate = getattr(self.gen, "rate", None)
        if isinstance(rate, int | float):
            return float(rate)
        return float(self.state.config.rate or 0.0)

    def _set_rate(self, rate: float) -> None:
        set_rate = getattr(self.gen, "set_rate", None)
        if set_rate is None:  # pragma: no cover - an open-loop generator always has it
            raise RuntimeError("the open-loop generator cannot change its rate")
        set_rate(rate)

    # -- the end ---------------------------------------------------------------------------------

    async def finish(self) -> None:
        """After the issue window: stop the driver, close the last step at the window's end,
        take the last counters' mark."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        steps, gs = self.state.steps, self.gen.state
        if not steps:
            return
        if steps[-1].end_s is None and gs.issue_ended_ns is not None:
            steps[-1].end_s = (gs.issue_ended_ns - self.state.origin_ns) / 1e9
        self.marks.append(StepMark(getattr(gs, "held_by_cap", 0), gs.backoffs))
        offered = self._offered_rates()
        self.state.step_counts = [
            StepCounts(
                offered_rate=offered[i],
                held_by_cap=b.held_by_cap - a.held_by_cap,
                backoffs=b.backoffs - a.backoffs,
            )
            for i, (a, b) in enumerate(zip(self.marks, self.marks[1:], strict=False))
        ]

    def _offered_rates(self) -> list[float | None]:
        """Open loop: each step's offered rate (:func:`step_offered_rates` under the
        generator's curve, with every change); None for a closed loop."""
        steps = self.state.steps
        curve = getattr(self.gen, "curve", None)
        timing = load_timing_for_steps(self.state)
        if not self.open_loop or curve is None or timing is None:
            return [None] * len(steps)
        released = (self._release_ns() - self.state.origin_ns) / 1e9
        spans = [judged_span(s, timing) for s in steps]
        return step_offered_rates(self.state.config, curve, released, spans, paused_spans(self.gen))


def step_offered_rates(
    cfg: RunConfig,
    curve: RateCurve,
    released_s: float,
    spans: Sequence[tuple[float, float] | None],
    paused: Sequence[tuple[float, float]] = (),
) -> list[float | None]:
    """Each step's offered rate: the schedule's arrivals (``curve`` drawn again from the
    config's seed; none inside an operator's pause, ``paused`` in seconds from the
    release) in its judged span (run seconds) ÷ the span. None for a step of no length,
    and for every step of a trace (its arrivals are its file's, not a curve's)."""
    if cfg.arrival not in ARRIVAL_MODELS:
        return [None] * len(spans)
    seed = cfg.arrival_seed if cfg.arrival_seed is not None else cfg.pool_seed
    counts = [0] * len(spans)
    i = 0  # the spans follow one another, as the arrivals do: one walk over both
    for offset in curve_offsets(cfg.arrival, curve, cfg.burstiness, seed):
        if in_spans(offset, paused):
            continue
        at = released_s + offset
        while i < len(spans) and ((span := spans[i]) is None or at >= span[1] - BOUNDARY_S):
            i += 1
        if i == len(spans):
            break
        lo_hi = spans[i]
        if lo_hi is not None and in_span(at, *lo_hi):
            counts[i] += 1
    return [
        None if span is None or span[1] <= span[0] else n / (span[1] - span[0])
        for n, span in zip(counts, spans, strict=True)
    ]


def ramp_changes(step: PlannedStep) -> list[tuple[float, int]]:
    """A closed-loop ramp's changes, (seconds into the step, workers): the line from
    ``start`` to ``end`` crosses each whole number once; the concurrency is the line
    rounded down (``n`` workers from the moment the line reaches ``n``)."""
    c0, c1, span = step.start, step.end, step.duration_s
    if c0 == c1 or span <= 0:
        return []
    if c1 > c0:
        return [(span * (n - c0) / (c1 - c0), n) for n in range(math.floor(c0) + 1, int(c1) + 1)]
    return [(span * (c0 - n - 1) / (c0 - c1), n) for n in range(math.ceil(c0) - 1, int(c1) - 1, -1)]


def load_timing_for_steps(st: RunState) -> LoadTiming | None:
    """The whole load's timing as finalize takes it (its judged start: the warm-up's end)."""
    from soak.run.steady_load import load_timing  # it starts this module's driver

    return load_timing(st)
