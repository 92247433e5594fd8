"""The snapshot's live views of the load's pace: an open loop's schedule against what
was sent (:class:`OpenLoopTally`) and a stepped load's steps (:func:`steps_now`).

Both run at the snapshot tick, once a second, never per request: the offered count
walks a second copy of the seeded schedule up to now (the arrivals of one second), the
sent count is the generator's counter, the lateness is the live stats' tally.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from loadgen.arrivals import ARRIVAL_MODELS, arrival_offsets
from loadgen.live import LiveLoadStats
from loadgen.open_loop import OpenLoopGenerator
from soak.record.models import LoadStep
from soak.record.snapshot import OpenLoopNow, StepNow, StepsNow
from soak.run.config import RunConfig
from soak.run.state import RunState


class OpenLoopTally:
    """Counts the schedule's arrivals due so far and keeps a window of (t, due, sent)."""

    def __init__(self, cfg: RunConfig, window_s: float) -> None:
        self.cfg = cfg
        self.window_s = window_s
        self._offsets: Iterator[float] | None = None
        self._next: float | None = None
        self.due = 0
        """Arrivals of the config's schedule whose intended time has come."""
        self._samples: deque[tuple[float, int, int]] = deque()

    def _advance(self, elapsed_s: float) -> None:
        if self._offsets is None:  # the generator's schedule, drawn again from its seed
            from soak.run.steady_load import arrival_seed  # it imports this module's user

            cfg, model = self.cfg, self.cfg.arrival
            if model == "trace":  # the replay's own times (parsed once per run: cached)
                from soak.run.trace_setup import scaled_offsets

                self._offsets = iter(scaled_offsets(cfg))
            else:
                assert model != "closed" and cfg.rate is not None
                seed = arrival_seed(cfg)
                self._offsets = arrival_offsets(model, cfg.rate, cfg.burstiness, seed)
            self._next = next(self._offsets, None)
        while self._next is not None and self._next <= elapsed_s:
            self.due += 1
            self._next = next(self._offsets, None)

    def view(self, st: RunState, live: LiveLoadStats) -> OpenLoopNow | None:
        """The open-loop line of this tick (None: a closed loop, or the window not open)."""
        gen, configured = st.gen, self.cfg.rate
        trace = self.cfg.arrival == "trace"
        if not isinstance(gen, OpenLoopGenerator) or (configured is None and not trace):
            return None
        gs = gen.state
        if gs.barrier_released_ns is None:
            return None
        now_s = st.now_s()
        released_s = (gs.barrier_released_ns - st.origin_ns) / 1e9
        end_s = now_s if gs.issue_ended_ns is None else (gs.issue_ended_ns - st.origin_ns) / 1e9
        elapsed = max(0.0, end_s - released_s)
        target = getattr(gen, "rate", None)  # the generator's target after a change
        rate = float(target) if isinstance(target, int | float) else configured
        known = trace or (  # the config's own model and rate throughout: redrawn
            self.cfg.arrival in ARRIVAL_MODELS
            and configured is not None
            and rate == configured
            and all(_steady(s, configured) for s in st.steps)
        )
        if known:
            self._advance(elapsed)
        sent = gs.arrivals_issued  # a session's later turns are not arrivals
        self._samples.append((elapsed, self.due, sent))
        while len(self._samples) > 2 and elapsed - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t0, due0, sent0 = self._samples[0]
        span = elapsed - t0
        late_window, late_all = live.lateness(now_s)
        return OpenLoopNow(
            arrival=self.cfg.arrival,
            rate=rate,
            max_in_flight=gen.max_in_flight,
            in_flight=gs.in_flight,
            in_flight_peak=gs.in_flight_peak,
            held_by_cap=gs.held_by_cap,
            skipped_paused=gs.skipped_paused,
            offered_window_per_s=(self.due - due0) / span if known and span > 0 else None,
            achieved_window_per_s=(sent - sent0) / span if span > 0 else None,
            offered_per_s=self.due / elapsed if known and elapsed > 0 else None,
            achieved_per_s=sent / elapsed if elapsed > 0 else None,
            lateness_window_s=late_window,
            lateness_s=late_all,
        )


def _steady(step: LoadStep, rate: float) -> bool:
    """A step at the config's rate throughout (the config's schedule still holds)."""
    return step.rate_start in (None, rate) and step.rate_end in (None, rate)


def steps_now(st: RunState, live: LiveLoadStats, planned: int | None) -> StepsNow | None:
    """The steps view of this tick (None: a load without steps). ``planned``: the plan's
    steps (``--stages``/``--sweep``), dropped once a live change ended the plan."""
    if not st.steps:
        return None
    if any(s.origin == "live" for s in st.steps):
        planned = None
    now = st.now_s()
    current = st.steps[-1]
    for step in st.steps:  # the running step: begun, not ended
        if step.start_s <= now and (step.end_s is None or now < step.end_s):
            current = step
    settle_left = current.start_s + current.settle_s - now if current.settle_s else None
    return StepsNow(
        current=current.index,
        planned=planned,
        settle_left_s=settle_left if settle_left is not None and settle_left > 0 else None,
        steps=[
            StepNow(
                index=s.index,
                label=s.label,
                origin=s.origin,
                start_s=s.start_s,
                rate=s.rate_end if s.rate_end is not None else s.rate_start,
                concurrency=s.concurrency_end
                if s.concurrency_end is not None
                else s.concurrency_start,
                completed=live.completed_by_step.get(s.index, 0),
            )
            for s in st.steps
        ],
    )
