"""The load summary, computed from ``requests.jsonl`` — by the runner and by ``verify``.

One function, one source of truth: the record's load figures are whatever this function
says about the journal, so anyone can recompute them from the files in the run directory.
How a tally holds its samples (typed arrays, the gaps shared by every tally of a read) is
:mod:`soak.record.tally_samples`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.outcome import usage_disagrees
from loadgen.stats import PercentileMethod, summarize
from soak.record.journal import read_jsonl
from soak.record.journal_scan import JournalScan
from soak.record.models import LoadSummary
from soak.record.tally_samples import ItlShare, ShareJoin, gap_stats, samples_view, shifted


@dataclass
class LoadTiming:
    """What the journal alone cannot tell: the barrier and the phase boundaries."""

    requested_concurrency: int
    workers_started: int
    barrier_released: bool
    worker_start_failures: dict[str, int] = field(default_factory=dict)
    barrier_released_at: str | None = None
    barrier_wait_s: float | None = None
    issue_start_s: float | None = None
    issue_end_s: float | None = None
    drain_end_s: float | None = None
    issued: int = 0
    stop_reason: str | None = None
    cancel_cause: str | None = None
    backoffs: int = 0
    worker_errors: dict[str, int] = field(default_factory=dict)
    sanity_checked: bool = False
    """The client checked every completed response (``RunConfig.sanity_checks``)."""
    offered_rate: float | None = None
    """Open loop: the schedule's rate, requests/s (None: the closed loop)."""
    held_by_cap: int | None = 0
    """Open loop: arrivals that waited for a slot under ``max_in_flight`` (None: not known,
    a recovered run whose snapshots never said)."""

    @classmethod
    def from_summary(cls, s: LoadSummary) -> LoadTiming:
        """The timing part of an existing summary (for ``verify``)."""
        drain_end = (
            s.issue_end_s + s.drain_s
            if s.issue_end_s is not None and s.drain_s is not None
            else None
        )
        return cls(
            requested_concurrency=s.requested_concurrency,
            workers_started=s.workers_started,
            barrier_released=s.barrier_released,
            worker_start_failures=dict(s.worker_start_failures),
            barrier_released_at=s.barrier_released_at,
            barrier_wait_s=s.barrier_wait_s,
            issue_start_s=s.issue_start_s,
            issue_end_s=s.issue_end_s,
            drain_end_s=drain_end,
            issued=s.issued,
            stop_reason=s.stop_reason,
            cancel_cause=s.cancel_cause,
            backoffs=s.backoffs,
            worker_errors=dict(s.worker_errors),
            sanity_checked=s.sanity_checked,
            offered_rate=s.offered_rate,
            held_by_cap=s.held_by_cap if s.offered_rate is not None else 0,
        )


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


def summarize_load(
    requests_path: Path,
    timing: LoadTiming,
    method: PercentileMethod = "nearest-rank",
    visit: Callable[[dict[str, Any]], None] | None = None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> LoadSummary:
    """Counts, tokens, throughput and exact latency percentiles from the journal.
    ``visit`` sees every load line too, so other figures need no second read. An
    open-loop load's lines are also measured from their intended send (a closed loop's
    pass is as it was: no extra call per line).

    ``keep`` slices the load: only the load lines it keeps are counted (a step's lines,
    ``line.get("step") == i``; a workload class's), and ``timing`` is then the slice's
    own (its span, its offered rate). ``visit`` sees only the kept lines.

    One tally, one read; to measure many slices, read once with :func:`summarize_slices`
    or :func:`read_load` (every slice of a record: :mod:`soak.judge.load_pass`)."""
    tally = LoadTally.for_timing(timing)
    add = tally.add
    for line in read_jsonl(requests_path):
        if line.get("phase", "load") != "load" or (keep is not None and not keep(line)):
            continue
        if visit is not None:
            visit(line)
        add(line)
    return tally.summary(timing, method)


LineOffer = Callable[[dict[str, Any]], None]
"""Something one load line is offered to: a tally's ``add``, a slice family's router, a
visitor."""


def read_load(
    requests_path: Path,
    offers: Sequence[LineOffer],
    every: Sequence[LineOffer] = (),
    scan: JournalScan | None = None,
    start: int = 0,
    end: int | None = None,
) -> None:
    """One read of the journal: every load line offered to each of ``offers`` in order —
    the whole load's tally and every slice family, so a record's figures cost one parse
    of each line, not one per slice.

    ``every`` is offered each line first, the warm-up's included (a window series, a
    count of lines by shard: what ``verify`` and ``recover`` need of the same read);
    ``scan``, when given, is the read, and counts the lines that are not JSON objects;
    with it, ``start``/``end`` read only the lines that begin in that byte range (one
    range of a split read: :mod:`soak.record.split_read`)."""
    lines = read_jsonl(requests_path) if scan is None else scan.lines(requests_path, start, end)
    for line in lines:
        for visit in every:
            visit(line)
        if line.get("phase", "load") != "load":
            continue
        for offer in offers:
            offer(line)


@dataclass(frozen=True)
class LoadSlice:
    """One slice of the load for :func:`summarize_slices`: the load lines ``keep`` takes,
    measured over ``timing`` (its span, its offered rate); ``visit`` sees only those."""

    keep: Callable[[dict[str, Any]], bool]
    timing: LoadTiming
    visit: LineOffer | None = None


def summarize_slices(
    requests_path: Path,
    whole_timing: LoadTiming,
    method: PercentileMethod,
    slices: Sequence[LoadSlice],
    visit: LineOffer | None = None,
) -> tuple[LoadSummary, list[LoadSummary]]:
    """The whole load's summary and each slice's, from one read: each load line counts
    for the whole load (``visit`` sees it) and for every slice whose ``keep`` takes it.
    Each result is what :func:`summarize_load` says of the slice alone.

    Every ``keep`` is called for every line: the general case. A family of slices keyed
    by a field of the line (a step index, a class name, a turn) routes each line to its
    slice with a dict look-up instead (:class:`KeyedTallies`, the step router in
    :mod:`soak.record.step_figures`): with tens of slices, calling every ``keep`` costs
    more than the tallies (``bench/finalize_cost.py``).

    Memory: a slice holds its own latency samples, 8 bytes each in a typed array (about
    40 bytes a completed request: ttft, e2e, tpot, ttfb, first content; 24 more in an
    open loop), and 4 bytes a request with gaps for where its gaps lie; the gaps
    themselves are held once for every tally of the read (:class:`ItlShare`: 4 bytes a
    gap, 8 a line), however many slices."""
    share = ItlShare()
    whole = LoadTally.for_timing(whole_timing, share)
    tallies = [LoadTally.for_timing(s.timing, share) for s in slices]
    routes = [(s.keep, s.visit, t.add) for s, t in zip(slices, tallies, strict=True)]
    add_whole = whole.add

    def offer(line: dict[str, Any]) -> None:
        if visit is not None:
            visit(line)
        add_whole(line)
        for keep, visit_slice, add in routes:
            if keep(line):
                if visit_slice is not None:
                    visit_slice(line)
                add(line)

    read_load(requests_path, [offer])
    return whole.summary(whole_timing, method), [
        t.summary(s.timing, method) for s, t in zip(slices, tallies, strict=True)
    ]


class KeyedTallies:
    """A family of slices keyed by one field of the line (``workload_class``, ``turn``):
    each load line offered goes to the tally of its value, one dict look-up — the same
    lines as a ``keep`` of ``line.get(key) == value`` per slice (a dict matches by
    ``==``, as the keep does), without calling one per slice."""

    __slots__ = ("key", "tallies")

    def __init__(self, key: str, tallies: dict[Any, LoadTally]) -> None:
        self.key = key
        self.tallies = tallies

    def offer(self, line: dict[str, Any]) -> None:
        """Route one load line to its slice's tally (none: no slice has its value)."""
        try:
            tally = self.tallies.get(line.get(self.key))
        except TypeError:  # an unhashable value (a damaged line) equals no slice's key
            return
        if tally is not None:
            tally.add(line)

    def begin_later_range(self) -> None:
        """A slice family's tallies need nothing of the lines before a range."""

    def part(self) -> dict[Any, LoadTally]:
        """The tallies, to be sent back by a later range's reader."""
        return self.tallies

    def join(self, part: dict[Any, LoadTally], shares: ShareJoin) -> None:
        """A later range's tallies (:meth:`part`) joined into these, slice by slice."""
        for key, tally in self.tallies.items():
            tally.join(part[key], shares)


@dataclass(slots=True)
class LoadTally:
    """What the load lines offered to it add up to, one line at a time (:meth:`add`), and
    the load summary they make with a timing (:meth:`summary`). :meth:`add` runs once a
    request (millions in a long soak) for the whole load and again for each slice the
    request is in, so it is kept lean: each field read once, no per-line allocation,
    counters in slots (as fast as the locals of the one-pass loop this replaced: 3.5 µs
    a line against its 4.7, the lat-dict loop unrolled), and a line's gaps stored once
    for all the tallies of a read (:class:`ItlShare`, the costliest step).

    Samples go to typed arrays, 8 bytes a value (a list of floats costs 32: the slot and
    the float object), so a 24-hour soak's millions of requests fit in memory with their
    exact values (DESIGN.md §5)."""

    issue_end_s: float | None
    """The issue window's end: what ``window_tokens`` counts up to."""
    sched: _ScheduleTally | None = None
    """Open loop: the lines measured from their intended send (None: a closed loop's)."""
    share: ItlShare = field(default_factory=ItlShare)
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    usage_missing: int = 0
    disagrees: int = 0
    disagree_example: str | None = None
    empty_answers: int = 0
    stale_retries: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    window_tokens: int = 0
    """Output tokens of the judged requests that finished inside the issue window
    (``end_s`` ≤ ``issue_end_s``): the numerator of ``output_tokens_per_s_issue_window``.
    Finished in the window, not received in it: a judged request is sent inside the window
    (a warm-up's are journaled apart), so one that ended by its close lies wholly inside,
    and one still in flight then counts for nothing."""
    classes: Counter[str] = field(default_factory=Counter)
    sanity: Counter[str] = field(default_factory=Counter)
    """Completed responses per sanity flag."""
    flagged: int = 0
    """Completed responses with a sanity flag."""
    ttft: array[float] = field(default_factory=lambda: array("d"))
    """Seconds, like every sample array: ttft, e2e, tpot, ttfb and fc (first content)."""
    e2e: array[float] = field(default_factory=lambda: array("d"))
    tpot: array[float] = field(default_factory=lambda: array("d"))
    ttfb: array[float] = field(default_factory=lambda: array("d"))
    fc: array[float] = field(default_factory=lambda: array("d"))
    itl_lines: array[int] = field(default_factory=lambda: array("I"))
    """Where each completed request's gaps lie in ``share`` (:meth:`ItlShare.of`)."""

    @classmethod
    def for_timing(cls, timing: LoadTiming, share: ItlShare | None = None) -> LoadTally:
        """A tally for a load (or a slice) of ``timing``: scheduled if it is an open
        loop's (``offered_rate``), as :func:`summarize_load` measures it."""
        sched = _ScheduleTally() if timing.offered_rate is not None else None
        return cls(timing.issue_end_s, sched, share if share is not None else ItlShare())

    @property
    def lines(self) -> int:
        """The load lines tallied (each is cancelled, failed or completed)."""
        return self.completed + self.failed + self.cancelled

    def add(self, line: dict[str, Any]) -> None:
        """One load line."""
        if self.sched is not None:
            self.sched.add(line)
        if line.get("stale_retry"):
            self.stale_retries += 1
        if line.get("cancelled"):
            self.cancelled += 1
            return
        if not line.get("ok"):
            self.failed += 1
            self.classes[str(line.get("failure"))] += 1
            return
        self.completed += 1
        if flags := line.get("sanity"):
            self.flagged += 1
            self.sanity.update(flags)
        ot, pt = line.get("output_tokens"), line.get("prompt_tokens")
        if ot is None or pt is None:
            self.usage_missing += 1
        chunks = line.get("chunks")
        if chunks == 0:
            self.empty_answers += 1
        if usage_disagrees(chunks, ot):
            self.disagrees += 1
            if self.disagree_example is None:
                self.disagree_example = (
                    f"{line.get('id')}: {chunks} token chunks, usage.completion_tokens {ot}"
                )
        self.output_tokens += ot or 0
        self.prompt_tokens += pt or 0
        end_s, issue_end_s = line.get("end_s"), self.issue_end_s
        if issue_end_s is not None and end_s is not None and end_s <= issue_end_s:
            self.window_tokens += ot or 0
        ttft, e2e = line.get("ttft_s"), line.get("e2e_s")
        if ttft is not None:
            self.ttft.append(ttft)
        if e2e is not None:
            self.e2e.append(e2e)
        if (ttfb := line.get("ttfb_s")) is not None:
            self.ttfb.append(ttfb)
        if (fc := line.get("first_content_s")) is not None:
            self.fc.append(fc)
        if ttft is not None and e2e is not None and ot and ot > 1:
            self.tpot.append((e2e - ttft) / (ot - 1))
        if gaps := line.get("itl_us"):
            self.itl_lines.append(self.share.of(line, gaps))

    def summary(self, timing: LoadTiming, method: PercentileMethod) -> LoadSummary:
        """The load summary of the lines tallied, over ``timing`` (the slice's own)."""
        return _summary(self, timing, method, self.sched)

    def begin_later_range(self) -> None:
        """A tally needs nothing of the lines before a range: its lines only add up."""

    def part(self) -> LoadTally:
        """This tally, to be sent back by a later range's reader (its share with it)."""
        return self

    def join(self, later: LoadTally, shares: ShareJoin) -> None:
        """The tally of the next byte range of the same read added, as if its lines had
        been offered here after these: counts summed, samples appended in journal order
        (so every percentile is one read's), its gaps re-indexed into this share."""
        base = shares.base(self.share, later.share)
        if self.sched is not None and later.sched is not None:
            self.sched.join(later.sched)
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(later, name))
        if self.disagree_example is None:
            self.disagree_example = later.disagree_example  # the journal's first
        self.classes.update(later.classes)
        self.sanity.update(later.sanity)
        for samples, more in (
            (self.ttft, later.ttft),
            (self.e2e, later.e2e),
            (self.tpot, later.tpot),
            (self.ttfb, later.ttfb),
            (self.fc, later.fc),
        ):
            samples.extend(more)
        self.itl_lines.extend(shifted(later.itl_lines, base))


_COUNTS = (
    "completed", "failed", "cancelled", "usage_missing", "disagrees", "empty_answers",
    "stale_retries", "prompt_tokens", "output_tokens", "window_tokens", "flagged",
)  # fmt: skip
""":class:`LoadTally`'s counters: what a join sums."""


@dataclass
class _ScheduleTally:
    """Open loop: the load lines measured from their intended send (``intended_s``)."""

    arrivals: int = 0
    """Judged requests that were arrivals of the schedule: every one, but in an open loop
    of sessions only turn 1s (a later turn is due after its previous answer, not
    offered by the schedule: ``loadgen.open_loop_sessions``)."""
    late: array[float] = field(default_factory=lambda: array("d"))
    """sent − intended of every judged request (every turn of a session's too)."""
    ttft: array[float] = field(default_factory=lambda: array("d"))
    """intended → first token of every completed one (lateness included)."""
    e2e: array[float] = field(default_factory=lambda: array("d"))

    def chain(
        self, visit: Callable[[dict[str, Any]], None] | None
    ) -> Callable[[dict[str, Any]], None]:
        """A visitor of the load lines that tallies them, then calls ``visit``."""

        def both(line: dict[str, Any]) -> None:
            self.add(line)
            if visit is not None:
                visit(line)

        return both

    def join(self, later: _ScheduleTally) -> None:
        """A later byte range's schedule tally appended (:meth:`LoadTally.join`)."""
        self.arrivals += later.arrivals
        self.late.extend(later.late)
        self.ttft.extend(later.ttft)
        self.e2e.extend(later.e2e)

    def add(self, line: dict[str, Any]) -> None:
        """One load line (a line without ``intended_s`` is not scheduled: skipped)."""
        if (intended := line.get("intended_s")) is None:
            return
        late = line["sent_s"] - intended
        self.late.append(late)
        if (turn := line.get("turn")) is None or turn == 1:
            self.arrivals += 1
        if line.get("ok"):  # from the schedule's time: what a user arriving then saw
            if (ttft := line.get("ttft_s")) is not None:
                self.ttft.append(ttft + late)
            if (e2e := line.get("e2e_s")) is not None:
                self.e2e.append(e2e + late)


def _sanity_counts(t: LoadTally, timing: LoadTiming) -> dict[str, Any]:
    """The sanity fields, only for a load that checked (else absent: not "0 flagged")."""
    if not timing.sanity_checked:
        return {}
    by_flag = dict(sorted(t.sanity.items()))
    return {"sanity_checked": True, "sanity_by_flag": by_flag, "sanity_flagged": t.flagged}


def _open_loop_figures(
    sched: _ScheduleTally | None, timing: LoadTiming, issue_s: float | None, m: PercentileMethod
) -> dict[str, Any]:
    """The schedule-relative figures, only for an open-loop load (else absent)."""
    if sched is None or timing.offered_rate is None:
        return {}
    return {
        "offered_rate": timing.offered_rate,
        # Every judged request is sent inside the issue window: its arrivals' lines are
        # the starts (a session's later turns are not the schedule's, so not counted).
        "achieved_rate": sched.arrivals / issue_s if issue_s else None,
        "lateness_s": summarize(samples_view(sched.late), m),
        "ttft_from_intended_s": summarize(samples_view(sched.ttft), m),
        "e2e_from_intended_s": summarize(samples_view(sched.e2e), m),
        "held_by_cap": timing.held_by_cap,
    }


def _summary(
    t: LoadTally, timing: LoadTiming, method: PercentileMethod, sched: _ScheduleTally | None = None
) -> LoadSummary:
    """The load summary of one tally and the timing the journal cannot tell."""
    issue_s = _span(timing.issue_start_s, timing.issue_end_s)
    drain_s = _span(timing.issue_end_s, timing.drain_end_s)
    elapsed = issue_s + drain_s if issue_s is not None and drain_s is not None else issue_s
    with_usage = t.completed - t.usage_missing
    return LoadSummary(
        requested_concurrency=timing.requested_concurrency,
        workers_started=timing.workers_started,
        worker_start_failures=timing.worker_start_failures,
        barrier_released=timing.barrier_released,
        barrier_released_at=timing.barrier_released_at,
        barrier_wait_s=timing.barrier_wait_s,
        issued=timing.issued,
        completed=t.completed,
        failed=t.failed,
        cancelled=t.cancelled,
        cancel_cause=timing.cancel_cause if t.cancelled else None,
        backoffs=timing.backoffs,
        worker_errors=timing.worker_errors,
        failures_by_class=dict(sorted(t.classes.items())),
        issue_start_s=timing.issue_start_s,
        issue_end_s=timing.issue_end_s,
        issue_s=issue_s,
        drain_s=drain_s,
        elapsed_s=elapsed,
        stop_reason=timing.stop_reason,
        prompt_tokens=t.prompt_tokens,
        output_tokens=t.output_tokens,
        usage_missing=t.usage_missing,
        usage_disagrees=t.disagrees,
        usage_disagrees_example=t.disagree_example,
        empty_answers=t.empty_answers,
        stale_connection_retries=t.stale_retries,
        **_sanity_counts(t, timing),
        **_open_loop_figures(sched, timing, issue_s, method),
        output_tokens_per_s=t.output_tokens / elapsed if elapsed else None,
        output_tokens_per_s_issue_window=t.window_tokens / issue_s if issue_s else None,
        requests_per_s=t.completed / elapsed if elapsed else None,
        ttft_s=summarize(samples_view(t.ttft), method),
        e2e_s=summarize(samples_view(t.e2e), method),
        itl_s=gap_stats(t.share.micros(t.itl_lines), method),
        tpot_s=summarize(samples_view(t.tpot), method),
        ttfb_s=summarize(samples_view(t.ttfb), method),
        first_content_s=summarize(samples_view(t.fc), method),
        input_tokens_mean=t.prompt_tokens / with_usage if with_usage else None,
    )


def warmup_accounting(requests_path: Path) -> dict[str, int]:
    """The soak warm-up's requests and tokens (phase ``warmup`` lines), for the counter
    reconciliation: the server counted them inside the load window."""
    acc = {"requests": 0, "completed": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for line in read_jsonl(requests_path):
        if line.get("phase") != "warmup":
            continue
        acc["requests"] += 1
        if line.get("ok"):
            acc["completed"] += 1
            acc["prompt_tokens"] += line.get("prompt_tokens") or 0
            acc["completion_tokens"] += line.get("output_tokens") or 0
    return acc
