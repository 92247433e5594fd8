"""Live load statistics for snapshots: a sliding window and the cumulative run, bounded.

Fed once per finished request on the runner's loop; read once per snapshot tick. Memory
is constant: a ring of per-second slots, each with fixed-size histograms, plus one
cumulative histogram per latency. Exact per-request values live in the journal.

A mixed load (``--mix``) also keeps one cumulative tally per workload class, so a class
threshold (``class.json.error_rate<1%,abort``) has a live figure. The classes are the
mix's, fixed when the stats are made: ``RequestResult.workload_class`` is set by soaktop
from the mix, never by the server, and a name outside the mix is not counted, so the keys
stay bounded. A run without a mix pays nothing for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from loadgen.envelope import RequestResult
from loadgen.read_health import MIN_SAMPLES_1S, PROCESS_TALLY, UNDECIDED_S, ReadTally, Streak
from loadgen.stats import LatencyStats, LogHistogram

LATENCIES = ("ttft", "e2e", "itl", "tpot")


class ThroughputView(BaseModel):
    """Counts and rates over one span (the sliding window or the whole load so far)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    absent_unless_set: ClassVar[frozenset[str]] = frozenset({"sanity_by_flag", "sanity_flagged"})
    """Keys a snapshot older than the sanity checks lacks: dumped only when given (every
    view made here gives them), so an older snapshot is written back as it was."""

    span_s: float
    completed: int
    failed: int
    output_tokens: int
    requests_per_s: float | None
    output_tokens_per_s: float | None
    ttft_s: LatencyStats
    e2e_s: LatencyStats
    itl_s: LatencyStats
    tpot_s: LatencyStats
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    sanity_by_flag: dict[str, int] = Field(default_factory=dict)
    """Completed responses per sanity flag (``loadgen.sanity``); one may have several."""
    sanity_flagged: int = 0
    """Completed responses with at least one sanity flag."""

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in self.absent_unless_set - self.model_fields_set:
            out.pop(name, None)
        return out


class _Slot:
    __slots__ = (
        "coalesced",
        "completed",
        "failed",
        "failures",
        "flagged",
        "hists",
        "late",
        "output_tokens",
        "q_hits",
        "q_samples",
        "sanity",
        "second",
        "tokens",
    )

    def __init__(self) -> None:
        self.second = -1
        self.completed = 0
        self.failed = 0
        self.output_tokens = 0
        self.failures: Counter[str] = Counter()
        self.sanity: Counter[str] = Counter()
        self.flagged = 0
        self.hists = {k: LogHistogram() for k in LATENCIES}
        self.late = LogHistogram()
        """Open loop: sent − intended of the requests that finished in this slot."""
        self.q_samples = self.q_hits = self.tokens = self.coalesced = 0
        """How the client read (``loadgen.read_health``): the receive-queue samples taken
        and those that found bytes queued, from the client's tally at the tick in this
        second; the token events, and events that shared a read with an earlier one, of
        the requests that finished in it."""

    def reset(self, second: int) -> None:
        self.second = second
        self.completed = self.failed = self.output_tokens = self.flagged = 0
        self.q_samples = self.q_hits = self.tokens = self.coalesced = 0
        self.failures.clear()
        self.sanity.clear()
        for h in (*self.hists.values(), self.late):
            h.counts[:] = 0
            h.n = 0
            h.total = 0.0
            h.max = None


class LiveLoadStats:
    """Sliding-window and cumulative throughput and latency, O(1) memory."""

    def __init__(
        self,
        window_s: int = 10,
        classes: Sequence[str] = (),
        tally: ReadTally = PROCESS_TALLY,
    ) -> None:
        if window_s < 1:
            raise ValueError(f"window_s must be >= 1, got {window_s}")
        self.window_s = window_s
        self._ring = [_Slot() for _ in range(window_s + 1)]
        self._cum = _Slot()
        self._cum.second = 0
        self._by_class = {name: _Slot() for name in classes}
        """Cumulative tally per workload class of the mix (empty without one)."""
        self._tally = tally
        """The client's samples as it takes them (``StreamClient.read_tally``)."""
        self._seen_samples, self._seen_hits = tally.samples, tally.hits
        """The tally's counts at the last tick (what came before is not the load's)."""
        self._last_samples = self._last_hits = 0
        """Samples and hits behind the last tick's decided share (0: it decided none)."""
        self._pending = (0, 0, 0.0)
        """Samples and hits not yet decided on, and the tick time they date from."""
        self.behind_streak = Streak()
        """Ticks whose last second found bytes queued on more than the bound's share of
        sampled reads (:meth:`tick_reads`): the record's ``behind_over_limit_s``."""
        self.completed_by_step: Counter[int] = Counter()
        """Completed requests per load step (``RequestResult.step``; none: 0), for the
        steps view."""

    def _slot(self, second: int) -> _Slot:
        slot = self._ring[second % len(self._ring)]
        if slot.second != second:
            slot.reset(second)
        return slot

    def record(self, r: RequestResult, now_s: float) -> None:
        """Count one finished request at monotonic time ``now_s`` (seconds since run start)."""
        if r.cancelled:
            return
        if r.intended_ns is not None:  # open loop: one subtraction, the lateness tally
            late_s = (r.sent_ns - r.intended_ns) / 1e9
            self._slot(int(now_s)).late.add(late_s)
            self._cum.late.add(late_s)
        if r.ok:  # a line without a step is the load before the first change: step 0
            self.completed_by_step[r.step or 0] += 1
        slots: tuple[_Slot, ...] = (self._slot(int(now_s)), self._cum)
        for slot in slots:  # how it was read: the whole load's, not per class
            slot.tokens += r.chunks
            slot.coalesced += r.coalesced
        if self._by_class:  # a mix: one lookup; a class outside it is not counted
            of_class = self._by_class.get(r.workload_class or "")
            if of_class is not None:
                slots = (*slots, of_class)
        for slot in slots:
            if r.ok:
                slot.completed += 1
                slot.output_tokens += r.output_tokens or 0
                if r.sanity:
                    slot.flagged += 1
                    slot.sanity.update(r.sanity)
            else:
                slot.failed += 1
                slot.failures[str(r.failure)] += 1
        if not r.ok:
            return
        lat = request_latencies(r)
        for key in ("ttft", "e2e", "tpot"):
            v = lat[key]
            if v is not None:
                for slot in slots:
                    slot.hists[key].add(v)
        if r.itl_ns:
            gaps = np.asarray(r.itl_ns, dtype=np.float64) / 1e9
            counts = LogHistogram.bucket_counts(gaps)  # once, for every slot
            for slot in slots:
                slot.hists["itl"].add_many(gaps, counts)

    def window(self, now_s: float, load_start_s: float) -> ThroughputView:
        """The last ``window_s`` full seconds, clipped to the load's start.

        The current second is still filling, so it is left out; the span is exactly the
        time the counted slots cover (a window that began before the barrier released is
        shortened to the release).
        """
        current = int(now_s)
        start = current - self.window_s
        merged = _Slot()
        for slot in self._ring:
            if start <= slot.second < current:
                _merge(merged, slot)
        span = max(0.0, current - max(float(start), load_start_s))
        return _view(merged, span)

    def cumulative(self, load_elapsed_s: float) -> ThroughputView:
        """Everything since the barrier released."""
        return _view(self._cum, load_elapsed_s)

    def class_cumulative(
        self, load_elapsed_s: float, names: Iterable[str] | None = None
    ) -> dict[str, ThroughputView]:
        """Each workload class's tally since the barrier released, by the mix's names in
        its order (empty without a mix), or only the classes ``names`` names, in that
        order (a name outside the mix: none); the rates are over the load's elapsed time,
        as the record's class figures are."""
        by_class = self._by_class
        if names is None:
            return {name: _view(slot, load_elapsed_s) for name, slot in by_class.items()}
        return {n: _view(by_class[n], load_elapsed_s) for n in names if n in by_class}

    def reads(self, now_s: float) -> ReadHealth:
        """How the client read (:mod:`loadgen.read_health`): over the last ``window_s``
        full seconds, since the last tick (:meth:`tick_reads`), and the whole load so far."""
        current = int(now_s)
        samples = hits = tokens = coalesced = 0  # sums only: no histograms merged
        for slot in self._ring:
            if current - self.window_s <= slot.second < current:
                samples += slot.q_samples
                hits += slot.q_hits
                tokens += slot.tokens
                coalesced += slot.coalesced
        last_fraction = None
        if self._last_samples >= MIN_SAMPLES_1S:
            last_fraction = self._last_hits / self._last_samples
        cum = self._cum
        return ReadHealth(
            behind_fraction=_fraction(hits, samples),
            events_per_read=_per_read(tokens, coalesced),
            behind_fraction_1s=last_fraction,
            samples=cum.q_samples,
            hits=cum.q_hits,
            load_behind_fraction=_fraction(cum.q_hits, cum.q_samples),
            load_events_per_read=_per_read(cum.tokens, cum.coalesced),
        )

    def tick_reads(self, now_s: float, bound: float, measuring: bool) -> ReadHealth:
        """At a snapshot tick: the client's samples since the last tick, from its tally
        (counted only while ``measuring``: the load or its drain), :meth:`reads`, and the
        behind streak updated.

        A tick's share is decided once ``MIN_SAMPLES_1S`` samples came in since the last
        decided one: a tick too soon after another (a late loop catching up) carries its
        few samples to the next, and leaves the streak as it is; ``UNDECIDED_S`` without
        enough samples (an idle load) ends the streak.
        """
        tally = self._tally
        samples = tally.samples - self._seen_samples
        hits = tally.hits - self._seen_hits
        self._seen_samples, self._seen_hits = tally.samples, tally.hits
        if not measuring:
            samples = hits = 0
            self._pending = (0, 0, now_s)
        for slot in (self._slot(int(now_s)), self._cum):
            slot.q_samples += samples
            slot.q_hits += hits
        p_samples, p_hits, since = self._pending
        p_samples, p_hits = p_samples + samples, p_hits + hits
        if p_samples >= MIN_SAMPLES_1S:
            self._last_samples, self._last_hits = p_samples, p_hits
            self._pending = (0, 0, now_s)
        else:
            self._last_samples = self._last_hits = 0
            self._pending = (p_samples, p_hits, since)
        rh = self.reads(now_s + 1.0)  # the window through this tick's second
        f = rh.behind_fraction_1s
        if f is not None:
            self.behind_streak.update(measuring and f > bound, now_s, f)
        elif not measuring or now_s - since > UNDECIDED_S:
            self.behind_streak.update(False, now_s)
        return rh

    def lateness(self, now_s: float) -> tuple[LatencyStats, LatencyStats]:
        """Open loop: sent − intended over the last ``window_s`` full seconds and over the
        whole load (empty stats in a closed loop: its requests have no intended time)."""
        current = int(now_s)
        window = LogHistogram()
        for slot in self._ring:
            if current - self.window_s <= slot.second < current:
                window.merge(slot.late)
        return window.stats(), self._cum.late.stats()


@dataclass(frozen=True, slots=True)
class ReadHealth:
    """How the client read its streams (:meth:`LiveLoadStats.reads`); None: not measured."""

    behind_fraction: float | None
    """Over the sliding window: share of sampled reads that found bytes already queued."""
    events_per_read: float | None
    """Over the sliding window: token events per token-carrying read (1.0: each read held
    one event, as a client that keeps up with a paced server reads them)."""
    behind_fraction_1s: float | None
    """The share since the previous tick, about a second (None below ``MIN_SAMPLES_1S``
    samples)."""
    samples: int
    """Receive-queue samples over the whole load so far."""
    hits: int
    """Of those, the samples that found bytes queued."""
    load_behind_fraction: float | None
    load_events_per_read: float | None


class BehindFigures(TypedDict):
    """The ``client_health`` fields :func:`behind_health` fills (``soak.record.models``)."""

    behind_fraction: float | None
    behind_samples: int
    behind_over_limit_s: float | None
    behind_fraction_in_streak: float | None
    events_per_read: float | None


def behind_health(live: LiveLoadStats) -> BehindFigures:
    """The record's ``client_health`` figures of how the client read (:mod:`loadgen.read_health`):
    the whole load's behind share and events per read, and the longest behind streak."""
    reads = live.reads(0.0)
    streak = live.behind_streak
    return BehindFigures(
        behind_fraction=_round4(reads.load_behind_fraction),
        behind_samples=reads.samples,
        behind_over_limit_s=round(streak.longest_s, 3) if reads.samples else None,
        behind_fraction_in_streak=_round4(streak.best_mean),
        events_per_read=_round4(reads.load_events_per_read),
    )


def _round4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _fraction(hits: int, samples: int) -> float | None:
    return hits / samples if samples else None


def _per_read(tokens: int, coalesced: int) -> float | None:
    reads = tokens - coalesced
    return tokens / reads if reads > 0 else None


def request_latencies(r: RequestResult) -> dict[str, float | None]:
    """TTFT, E2E and TPOT in seconds for one request (``None`` where not measurable)."""
    ttft = (r.first_token_ns - r.sent_ns) / 1e9 if r.first_token_ns is not None else None
    e2e = (r.end_ns - r.sent_ns) / 1e9 if r.end_ns is not None else None
    tpot = None
    if ttft is not None and e2e is not None and r.output_tokens and r.output_tokens > 1:
        tpot = (e2e - ttft) / (r.output_tokens - 1)
    return {"ttft": ttft, "e2e": e2e, "tpot": tpot}


def _merge(into: _Slot, slot: _Slot) -> None:
    into.completed += slot.completed
    into.q_samples += slot.q_samples
    into.q_hits += slot.q_hits
    into.tokens += slot.tokens
    into.coalesced += slot.coalesced
    into.failed += slot.failed
    into.output_tokens += slot.output_tokens
    into.failures.update(slot.failures)
    into.flagged += slot.flagged
    into.sanity.update(slot.sanity)
    for k in LATENCIES:
        into.hists[k].merge(slot.hists[k])


def _view(slot: _Slot, span_s: float) -> ThroughputView:
    rate = span_s > 0
    return ThroughputView(
        span_s=span_s,
        completed=slot.completed,
        failed=slot.failed,
        output_tokens=slot.output_tokens,
        requests_per_s=slot.completed / span_s if rate else None,
        output_tokens_per_s=slot.output_tokens / span_s if rate else None,
        ttft_s=slot.hists["ttft"].stats(),
        e2e_s=slot.hists["e2e"].stats(),
        itl_s=slot.hists["itl"].stats(),
        tpot_s=slot.hists["tpot"].stats(),
        failures_by_class=dict(slot.failures),
        sanity_by_flag=dict(slot.sanity),
        sanity_flagged=slot.flagged,
    )


class SecondsFold:
    """Whole seconds of the live ring merged into one span as they finish: a soak window
    (``soak.run.window_tick``), at no cost on the request path.

    Fold each second once it is complete and before the ring reuses its slot (the ring
    holds ``window_s + 1`` seconds; the snapshot tick folds every second).
    """

    def __init__(self, live: LiveLoadStats) -> None:
        self._live = live
        self._acc = _Slot()
        self.lost = 0
        """Seconds the ring had reused before they were folded (a tick that came late)."""

    def add(self, second: int) -> None:
        """Merge whole second ``second`` (seconds since the run's origin) into the span."""
        ring = self._live._ring
        slot = ring[second % len(ring)]
        if slot.second == second:
            _merge(self._acc, slot)
        elif slot.second > second:
            self.lost += 1  # a second without requests leaves an older slot: not lost

    def take(self, span_s: float) -> tuple[ThroughputView, int]:
        """The span folded so far over ``span_s`` seconds and its lost seconds; restart."""
        view, lost = _view(self._acc, span_s), self.lost
        self._acc = _Slot()
        self.lost = 0
        return view, lost
