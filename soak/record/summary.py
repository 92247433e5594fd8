"""The load summary, computed from ``requests.jsonl`` — by the runner and by ``verify``.

One function, one source of truth: the record's load figures are whatever this function
says about the journal, so anyone can recompute them from the files in the run directory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.outcome import usage_disagrees
from loadgen.stats import PercentileMethod, summarize
from soak.record.journal import read_jsonl
from soak.record.models import LoadSummary


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
    own (its span, its offered rate). ``visit`` sees only the kept lines."""
    if timing.offered_rate is None:
        return _summary(_tally(requests_path, timing.issue_end_s, visit, keep), timing, method)
    sched = _ScheduleTally()
    tally = _tally(requests_path, timing.issue_end_s, sched.chain(visit), keep)
    return _summary(tally, timing, method, sched)


@dataclass
class _Tally:
    """What the journal's load lines add up to (one pass, :func:`_tally`)."""

    completed: int
    failed: int
    cancelled: int
    usage_missing: int
    disagrees: int
    disagree_example: str | None
    empty_answers: int
    stale_retries: int
    prompt_tokens: int
    output_tokens: int
    window_tokens: int
    """Output tokens of the judged requests that finished inside the issue window
    (``end_s`` ≤ ``issue_end_s``): the numerator of ``output_tokens_per_s_issue_window``.
    Finished in the window, not received in it: a judged request is sent inside the window
    (a warm-up's are journaled apart), so one that ended by its close lies wholly inside,
    and one still in flight then counts for nothing."""
    classes: Counter[str]
    sanity: Counter[str]
    """Completed responses per sanity flag."""
    flagged: int
    """Completed responses with a sanity flag."""
    lat: dict[str, list[float]]
    """ttft, e2e, tpot, ttfb and fc (first content) samples, seconds."""
    itl: list[np.ndarray]


@dataclass
class _ScheduleTally:
    """Open loop: the load lines measured from their intended send (``intended_s``)."""

    late: list[float] = field(default_factory=list)
    """sent − intended of every judged request."""
    ttft: list[float] = field(default_factory=list)
    """intended → first token of every completed one (lateness included)."""
    e2e: list[float] = field(default_factory=list)

    def chain(
        self, visit: Callable[[dict[str, Any]], None] | None
    ) -> Callable[[dict[str, Any]], None]:
        """A visitor of the load lines that tallies them, then calls ``visit``."""

        def both(line: dict[str, Any]) -> None:
            self.add(line)
            if visit is not None:
                visit(line)

        return both

    def add(self, line: dict[str, Any]) -> None:
        """One load line (a line without ``intended_s`` is not scheduled: skipped)."""
        if (intended := line.get("intended_s")) is None:
            return
        late = line["sent_s"] - intended
        self.late.append(late)
        if line.get("ok"):  # from the schedule's time: what a user arriving then saw
            if (ttft := line.get("ttft_s")) is not None:
                self.ttft.append(ttft + late)
            if (e2e := line.get("e2e_s")) is not None:
                self.e2e.append(e2e + late)


def _tally(
    requests_path: Path,
    issue_end_s: float | None,
    visit: Callable[[dict[str, Any]], None] | None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> _Tally:
    """One pass over the load lines. Local counters, not attributes: this loop runs once a
    request (millions of lines in a long soak), at the end of the run and in ``verify``."""
    completed = failed = cancelled = usage_missing = 0
    disagrees = empty_answers = stale_retries = flagged = 0
    disagree_example: str | None = None
    prompt_tokens = output_tokens = window_tokens = 0
    classes: Counter[str] = Counter()
    sanity: Counter[str] = Counter()
    lat: dict[str, list[float]] = {k: [] for k in ("ttft", "e2e", "tpot", "ttfb", "fc")}
    itl: list[np.ndarray] = []
    for line in read_jsonl(requests_path):
        if line.get("phase", "load") != "load" or (keep is not None and not keep(line)):
            continue
        if visit is not None:
            visit(line)
        if line.get("stale_retry"):
            stale_retries += 1
        if line.get("cancelled"):
            cancelled += 1
            continue
        if not line.get("ok"):
            failed += 1
            classes[str(line.get("failure"))] += 1
            continue
        completed += 1
        if flags := line.get("sanity"):
            flagged += 1
            sanity.update(flags)
        ot, pt = line.get("output_tokens"), line.get("prompt_tokens")
        if ot is None or pt is None:
            usage_missing += 1
        chunks = line.get("chunks")
        if chunks == 0:
            empty_answers += 1
        if usage_disagrees(chunks, ot):
            disagrees += 1
            if disagree_example is None:
                disagree_example = (
                    f"{line.get('id')}: {chunks} token chunks, usage.completion_tokens {ot}"
                )
        output_tokens += ot or 0
        prompt_tokens += pt or 0
        end_s = line.get("end_s")
        if issue_end_s is not None and end_s is not None and end_s <= issue_end_s:
            window_tokens += ot or 0
        ttft, e2e = line.get("ttft_s"), line.get("e2e_s")
        for key, v in (("ttft", ttft), ("e2e", e2e), ("ttfb", line.get("ttfb_s"))):
            if v is not None:
                lat[key].append(v)
        if line.get("first_content_s") is not None:
            lat["fc"].append(line["first_content_s"])
        if ttft is not None and e2e is not None and ot and ot > 1:
            lat["tpot"].append((e2e - ttft) / (ot - 1))
        gaps = line.get("itl_us")
        if gaps:
            itl.append(np.asarray(gaps, dtype=np.float64) / 1e6)
    return _Tally(
        completed=completed,
        failed=failed,
        cancelled=cancelled,
        usage_missing=usage_missing,
        disagrees=disagrees,
        disagree_example=disagree_example,
        empty_answers=empty_answers,
        stale_retries=stale_retries,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        window_tokens=window_tokens,
        classes=classes,
        sanity=sanity,
        flagged=flagged,
        lat=lat,
        itl=itl,
    )


def _sanity_counts(t: _Tally, timing: LoadTiming) -> dict[str, Any]:
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
        # Every judged request is sent inside the issue window: its lines are the starts.
        "achieved_rate": len(sched.late) / issue_s if issue_s else None,
        "lateness_s": summarize(sched.late, m),
        "ttft_from_intended_s": summarize(sched.ttft, m),
        "e2e_from_intended_s": summarize(sched.e2e, m),
        "held_by_cap": timing.held_by_cap,
    }


def _summary(
    t: _Tally, timing: LoadTiming, method: PercentileMethod, sched: _ScheduleTally | None = None
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
        ttft_s=summarize(t.lat["ttft"], method),
        e2e_s=summarize(t.lat["e2e"], method),
        itl_s=summarize(np.concatenate(t.itl) if t.itl else np.empty(0), method),
        tpot_s=summarize(t.lat["tpot"], method),
        ttfb_s=summarize(t.lat["ttfb"], method),
        first_content_s=summarize(t.lat["fc"], method),
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
