"""Each load step's figures from the journal: finalize, verify and recover share them.

A step's figures are :func:`soak.record.summary.summarize_load` sliced to its requests.
Closed loop: the journal's load lines whose ``step`` is the step's index (the step the
worker sent it in), sent after its settle time; a line without ``step`` counts as step 0
(a run without a plan stamps its requests only from the first live change on, so the
load before it is step 0). Open loop: the lines whose *intended* time falls in the step's
judged span — the step whose schedule asked for the request, as the offered rate counts
it; a request sent late past a boundary is that step's lateness, not the next step's
load (its ``step`` stamp says when it was sent).

Each step is measured over its own span, ``start_s + settle_s`` (or the warm-up's end,
if later) to ``end_s``, with no drain: its rates are per second of the step, and the tail
of a request still in flight at the boundary counts for the step it was sent in. The
counters the journal cannot tell — the open loop's offered rate (its schedule's arrivals
in the span ÷ the span) and the arrivals held by the cap — come from the run
(:class:`StepCounts`) and, for ``verify``, from the record's own step figures, as the
whole load's timing does (:meth:`LoadTiming.from_summary`).

``goodput`` is the step's good requests ÷ its span; what a good request is comes from
the room above (:mod:`soak.judge.goodput`, the ``--slo``) as a predicate on a line.

All the steps are measured in one read of the journal (:class:`StepTallies`), with the
whole load and the record's other slices when finalize, verify and recover measure them
(:mod:`soak.judge.load_pass`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.stats import PercentileMethod
from soak.record.models import LoadStep, SweepResult
from soak.record.summary import LoadTally, LoadTiming, read_load
from soak.record.tally_samples import ItlShare, ShareJoin


@dataclass(frozen=True)
class StepCounts:
    """What only the run knows of one step."""

    offered_rate: float | None = None
    """Open loop: the schedule's arrivals in the step's span ÷ the span (None: closed)."""
    held_by_cap: int | None = 0
    """Arrivals held by the cap in the step (None: not known — a recovered run's)."""
    backoffs: int = 0


def counts_from_record(steps: Sequence[LoadStep]) -> list[StepCounts]:
    """The run-only counters as the record's steps hold them (for ``verify``)."""
    return [
        StepCounts(s.load.offered_rate, s.load.held_by_cap, s.load.backoffs)
        if s.load is not None
        else StepCounts()
        for s in steps
    ]


BOUNDARY_S = 1e-6
"""How near a step's boundary an intended time counts as on it. The scheduler truncates
an arrival's time to whole nanoseconds and the journal subtracts in floats, so a tie (a
constant rate whose arrivals fall on the boundaries) lands a hair to either side of it;
on it, it is the later step's, for the journal's lines and the offered count alike."""


def in_span(at: float, lo: float, hi: float) -> bool:
    """Whether an intended time (run seconds) falls in the span ``[lo, hi)``, ties within
    :data:`BOUNDARY_S` going to the later span: one rule for the lines a step keeps and the
    arrivals its offered rate counts, so the two cannot disagree by one arrival."""
    return lo - BOUNDARY_S <= at < hi - BOUNDARY_S


def judged_span(step: LoadStep, whole: LoadTiming) -> tuple[float, float] | None:
    """The step's judged span (run seconds): after its settle and the warm-up, to its
    end or the issue window's, whichever is first; None while it has no end."""
    if step.end_s is None:
        return None
    hi = step.end_s
    if whole.issue_end_s is not None:
        # Nothing is sent after issuing stopped: a load stopped early (an operator's stop,
        # an abort) can have a step that ends, or even begins, in its drain.
        hi = min(hi, whole.issue_end_s)
    lo = step.start_s + step.settle_s
    if whole.issue_start_s is not None:
        lo = max(lo, whole.issue_start_s)  # the warm-up's requests are not the step's
    return min(lo, hi), hi


def step_timing(
    step: LoadStep, whole: LoadTiming, counts: StepCounts, last: bool
) -> LoadTiming | None:
    """The step's own :class:`LoadTiming` (None while it has no end)."""
    span = judged_span(step, whole)
    if span is None:
        return None
    lo, hi = span
    concurrency = [c for c in (step.concurrency_start, step.concurrency_end) if c is not None]
    return replace(
        whole,
        requested_concurrency=max(concurrency) if concurrency else whole.requested_concurrency,
        issue_start_s=lo,
        issue_end_s=hi,
        drain_end_s=hi,
        issued=0,  # counted from the step's lines below
        stop_reason=whole.stop_reason if last else None,
        backoffs=counts.backoffs,
        worker_errors={},
        offered_rate=counts.offered_rate if whole.offered_rate is not None else None,
        held_by_cap=counts.held_by_cap,
    )


def step_figures(
    requests_path: Path,
    steps: Sequence[LoadStep],
    whole: LoadTiming,
    method: PercentileMethod,
    counts: Sequence[StepCounts],
    good: Callable[[dict[str, Any]], bool],
) -> list[LoadStep]:
    """Every step with its figures and goodput, ``good`` saying which of its lines count:
    one read of the journal for all the steps (:class:`StepTallies`)."""
    tallies = StepTallies(steps, whole, counts, good)
    if tallies.reads:
        read_load(requests_path, [tallies.offer])
    return tallies.figures(method)


@dataclass
class _StepSlot:
    """One measured step's part of a read: its span, its tally, its good requests."""

    timing: LoadTiming
    lo: float
    hi: float
    tally: LoadTally
    good: _GoodTally

    def take(self, line: dict[str, Any]) -> None:
        self.good(line)
        self.tally.add(line)


class StepTallies:
    """Every step's tally for one read of the journal, and their figures after it
    (:meth:`figures`). Each load line offered goes to the steps whose lines it is (the
    module docstring's rule, :func:`step_lines`'s) by a look-up, not a call per step: a
    scheduled line by its intended time (a bisect over the steps' spans, which do not
    overlap as the runner writes them; a scan over them where they do), an unscheduled
    one by its ``step`` stamp. A step costs a tally (:class:`LoadTally`: its latency
    samples) for the length of the read."""

    def __init__(
        self,
        steps: Sequence[LoadStep],
        whole: LoadTiming,
        counts: Sequence[StepCounts],
        good: Callable[[dict[str, Any]], bool],
        share: ItlShare | None = None,
    ) -> None:
        share = share if share is not None else ItlShare()
        self.steps = list(steps)
        self.slots: list[_StepSlot | None] = []
        for step, c in zip(steps, counts, strict=True):
            timing = step_timing(step, whole, c, last=step is steps[-1])
            if timing is None:
                self.slots.append(None)
                continue
            lo = timing.issue_start_s or 0.0  # as step_lines takes them
            hi = timing.issue_end_s if timing.issue_end_s is not None else float("inf")
            tally = LoadTally.for_timing(timing, share)
            self.slots.append(_StepSlot(timing, lo, hi, tally, _GoodTally(good)))
        live = [s for s in self.slots if s is not None]
        self.by_index: dict[int, list[_StepSlot]] = {}
        for step, slot in zip(self.steps, self.slots, strict=True):
            if slot is not None:
                self.by_index.setdefault(step.index, []).append(slot)
        self.by_time = sorted(live, key=lambda s: (s.lo, s.hi))
        self.bounds: list[float] | None = [s.lo - BOUNDARY_S for s in self.by_time]
        if any(a.hi - BOUNDARY_S > b.lo - BOUNDARY_S for a, b in itertools.pairwise(self.by_time)):
            self.bounds = None  # overlapping spans (not the runner's): every span is tried

    @property
    def reads(self) -> bool:
        """Whether any step is measured (none: the journal need not be read for them)."""
        return bool(self.by_time)

    def offer(self, line: dict[str, Any]) -> None:
        """Route one load line to the steps whose line it is."""
        at = line.get("intended_s")
        if at is not None:
            at = float(at)
            if self.bounds is None:
                for slot in self.by_time:
                    if in_span(at, slot.lo, slot.hi):
                        slot.take(line)
                return
            i = bisect.bisect_right(self.bounds, at) - 1
            if i >= 0 and at < (slot := self.by_time[i]).hi - BOUNDARY_S:
                slot.take(line)  # in_span: the bisect holds its lower bound
            return
        try:
            stamped = self.by_index.get(line.get("step", 0))
        except TypeError:  # an unhashable stamp (a damaged line) is no step's index
            return
        if stamped:
            sent = float(line["sent_s"])
            for slot in stamped:
                if sent >= slot.lo:
                    slot.take(line)

    def begin_later_range(self) -> None:
        """The steps' spans and stamps route a line alone: nothing of the lines before."""

    def part(self) -> list[tuple[LoadTally, int] | None]:
        """Each step's tally and good requests, to be sent back by a later range's reader
        (the routes and the ``good`` rule stay: they are this read's already)."""
        return [None if s is None else (s.tally, s.good.good) for s in self.slots]

    def join(self, part: list[tuple[LoadTally, int] | None], shares: ShareJoin) -> None:
        """A later range's steps (:meth:`part`) joined into these, step by step."""
        for slot, got in zip(self.slots, part, strict=True):
            if slot is not None and got is not None:
                slot.tally.join(got[0], shares)
                slot.good.good += got[1]

    def figures(self, method: PercentileMethod) -> list[LoadStep]:
        """Every step with its figures and goodput (None for a step with no end)."""
        out: list[LoadStep] = []
        for step, slot in zip(self.steps, self.slots, strict=True):
            if slot is None:
                out.append(step.model_copy(update={"load": None, "goodput": None}))
                continue
            load = slot.tally.summary(slot.timing, method)
            load = load.model_copy(update={"issued": slot.tally.lines})
            rate = slot.good.good / load.issue_s if load.issue_s else None
            out.append(step.model_copy(update={"load": load, "goodput": rate}))
        return out


class _GoodTally:
    """A journal visitor counting the lines ``good`` keeps."""

    __slots__ = ("good", "is_good")

    def __init__(self, is_good: Callable[[dict[str, Any]], bool]) -> None:
        self.is_good = is_good
        self.good = 0

    def __call__(self, line: dict[str, Any]) -> None:
        if self.is_good(line):
            self.good += 1


def step_lines(index: int, timing: LoadTiming) -> Callable[[dict[str, Any]], bool]:
    """The step's lines (see the module docstring) as a ``keep`` for
    :func:`~soak.record.summary.summarize_load`, ``timing`` the step's own: scheduled in
    its span, or stamped ``index`` (no stamp: step 0) and sent after its settle.
    :class:`StepTallies` routes by this rule for all the steps at once (the tests hold
    the two equal)."""
    lo = timing.issue_start_s or 0.0
    hi = timing.issue_end_s if timing.issue_end_s is not None else float("inf")

    def keep(line: dict[str, Any]) -> bool:
        at = line.get("intended_s")
        if at is not None:
            return in_span(float(at), lo, hi)
        return line.get("step", 0) == index and float(line["sent_s"]) >= lo

    return keep


def steps_from_events(
    events: Iterable[Mapping[str, Any]], issue_end_s: float | None
) -> list[LoadStep]:
    """The steps a run announced (its ``step`` events, each holding its
    :class:`LoadStep`), each ended by the next one's start, the last by the issue
    window's end, as the runner ends them: how ``recover`` finds the steps of a run that
    wrote no record, and what ``verify`` holds the record's steps to."""
    steps = [
        LoadStep.model_validate(ev["data"]["step"])
        for ev in events
        if ev.get("kind") == "step" and isinstance(ev.get("data", {}).get("step"), dict)
    ]
    for before, after in itertools.pairwise(steps):
        before.end_s = after.start_s
    if steps and issue_end_s is not None:
        # Not raised to its start: a step begun in the drain of a load stopped early ends
        # before it began, as the runner writes it; judged_span measures nothing of it.
        steps[-1].end_s = issue_end_s
    return steps


def step_sections(steps: Sequence[LoadStep], sweep: SweepResult | None) -> dict[str, Any]:
    """The record's ``steps`` and ``sweep`` keys, only those a load has (a load without
    steps writes neither: its record stays as it was)."""
    out: dict[str, Any] = {}
    if steps:
        out["steps"] = list(steps)
    if sweep is not None:
        out["sweep"] = sweep
    return out
