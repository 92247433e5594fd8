"""The whole-run verdict: PASSED, FAILED, INVALID or ABORTED, with reasons (DESIGN.md §6).

:func:`judge` is the one function that turns a run's facts (:class:`RunFacts`) into its
findings and reasons; finalize, ``soaktop recover`` and ``soaktop verify`` all call it,
and differ only in how they gather the facts. Every finding becomes a ``Reason``; the
status follows from the strongest effect: aborted > invalid > failed > passed. Findings
never cancel each other out: an INVALID load measurement still lists a server failure
seen during it.
"""

from __future__ import annotations

from probes.gates import PHASE_WORDS, GateFailure
from soak.judge.class_thresholds import class_metrics
from soak.judge.coverage import coverage_reasons
from soak.judge.endurance_verdict import endurance_reasons
from soak.judge.facts import Judgement, RunFacts
from soak.judge.faults import fault_reasons, gpu_fault_reasons, restart_reasons
from soak.judge.load_reasons import load_reasons
from soak.judge.matrix import matrix_reasons
from soak.judge.rate_reasons import rate_reasons
from soak.judge.reconcile import reconcile_reasons
from soak.judge.sanity import sanity_reasons
from soak.judge.shard_reasons import shard_reasons
from soak.judge.soak_policy import defaults_applied, policy_states
from soak.judge.step_reasons import step_reasons
from soak.judge.thresholds import (
    ThresholdState,
    evaluate,
    metrics_from_record,
    record_source,
    threshold_reasons,
)
from soak.judge.trend_metrics import is_trend_metric
from soak.record.faults import load_start
from soak.record.models import ClientHealth, Reason, Status

_PRECEDENCE = (
    ("aborted", Status.ABORTED),
    ("invalid", Status.INVALID),
    ("failed", Status.FAILED),
)
_ORDER = {"aborted": 0, "invalid": 1, "failed": 2, "note": 3}


def judge(f: RunFacts) -> Judgement:
    """The verdict of a run: its status, its reasons (strongest first) and its final
    threshold states."""
    final = final_thresholds(f)
    at = load_start(f.load, f.matrix)
    reasons = [Reason(code="preflight", effect="failed", message=m) for m in f.preflight_errors]
    if f.aborted is not None:
        reasons.append(Reason(code="aborted", effect="aborted", message=f.aborted))
    reasons += (
        load_reasons(f.load, f.max_failures, f.aborted is not None)
        + rate_reasons(f.load)
        + step_reasons(f.steps)
        + sanity_reasons(f.load, f.max_sanity_share)
        + gate_reasons(f)
        + _health_reasons(f)
        + _soaktop_reasons(f)
        + fault_reasons(f.telemetry, at, f.client_overload_s)
        + coverage_reasons(f.telemetry, f.require_telemetry)
        + restart_reasons(f.telemetry, at)
        + gpu_fault_reasons(f.gpu_fault_events)
        + _threshold_reasons(f, final)
        + reconcile_reasons(dict(f.reconciliation), f.reconcile_strict)
        + _pause_notes(f)
        + (matrix_reasons(f.matrix, f.max_failures, f.was_stopped) if f.matrix is not None else [])
        + shard_reasons(f.shards, f.max_loop_lag_s)
        + f.extra
    )
    reasons.sort(key=lambda r: _ORDER[r.effect])
    return Judgement(status=status_of(reasons), reasons=reasons, thresholds=final)


def decide(f: RunFacts) -> tuple[Status, list[Reason]]:
    """The status and the reasons, strongest first (:func:`judge` without the thresholds)."""
    j = judge(f)
    return j.status, j.reasons


def status_of(reasons: list[Reason]) -> Status:
    """The status that a list of reasons implies (the strongest effect)."""
    effects = {r.effect for r in reasons}
    for effect, status in _PRECEDENCE:
        if effect in effects:
            return status
    return Status.PASSED


def final_thresholds(f: RunFacts) -> list[ThresholdState]:
    """Each threshold checked against the record's figures, with the first live breach
    the watch saw, then the default soak policy's items that could be checked (the
    record's ``thresholds``)."""
    metrics = metrics_from_record(f.load, f.telemetry, f.endurance) | class_metrics(f.classes)
    states = evaluate(f.thresholds, metrics, record_source(f.load))
    first = {s.expr: s.first_breach_s for s in f.threshold_live}
    states = [s.model_copy(update={"first_breach_s": first.get(s.expr)}) for s in states]
    return states + policy_states(defaults_applied(f.endurance, f.thresholds), f.endurance)


def _threshold_reasons(f: RunFacts, final: list[ThresholdState]) -> list[Reason]:
    """Threshold reasons; when no load was measured (before gates failed, preflight, an
    abort before the barrier) the verdict already says why, and a threshold that had
    nothing to judge is a note, not an INVALID that would hide a server's FAILED. A drift
    or leak threshold with data is the endurance judgement's (``endurance_reasons``)."""
    abort = f.threshold_abort.expr if f.threshold_abort is not None else None
    trend = [
        st
        for st in final
        if is_trend_metric(st.metric) and st.state != "no_data" and st.expr != abort
    ]
    final = [st for st in final if st not in trend]
    notes: list[Reason] = endurance_reasons(f.endurance, trend)
    if f.load is None or not f.load.barrier_released:
        notes += [
            Reason(
                code="threshold_not_evaluated",
                effect="note",
                message=f"threshold {st.condition} was not evaluated: no load ran",
            )
            for st in final
            if st.state == "no_data"
        ]
        final = [st for st in final if st.state != "no_data"]
    return threshold_reasons(final, f.threshold_live, f.threshold_abort) + notes


def _soaktop_reasons(f: RunFacts) -> list[Reason]:
    """The run directory could not be written; soaktop itself failed."""
    out: list[Reason] = []
    if f.storage_error is not None:
        out.append(
            Reason(
                code="storage_error",
                effect="aborted",
                message=f"the run directory could not be written: {f.storage_error}; "
                "issuing stopped and in-flight requests were cut (exit 5)",
            )
        )
    out += [
        Reason(
            code="internal_error",
            effect="invalid",
            message=f"soaktop itself failed ({msg}); see runner.log",
        )
        for msg in f.internal_errors
    ]
    return out


def _pause_notes(f: RunFacts) -> list[Reason]:
    """A pause is part of the issue window: the throughput figures include it."""
    spans = [p for p in f.phases if p.name == "paused"]
    if not spans:
        return []
    total = sum((p.end_s or f.now_s or p.start_s) - p.start_s for p in spans)
    return [
        Reason(
            code="paused",
            effect="note",
            message=f"the operator paused issuing {len(spans)}× for {total:.1f} s in all: "
            "the issue window and its throughput figures include the pauses",
        )
    ]


FAILURES_SHOWN = 3
"""Failed probes named in one gate reason; the rest are counted."""


def _describe_failure(g: GateFailure) -> str:
    when = f" round {g.round} at {g.t_s:.0f} s" if g.round is not None else ""
    return f"{g.label}{when} {g.reason} ({g.outcome})"


def gate_reasons(f: RunFacts) -> list[Reason]:
    """One reason per failed suite and phase, e.g. ``after-load json 23/24: json#7
    (invoice) HTTP 500: ... (availability)``; notes for retries and skipped phases."""
    out: list[Reason] = []
    for phase in ("before", "canary", "after"):
        for suite, g in f.gates.get(phase, {}).items():
            if g.failures:
                shown = "; ".join(_describe_failure(x) for x in g.failures[:FAILURES_SHOWN])
                more = len(g.failures) - FAILURES_SHOWN
                tail = f"; +{more} more (probes.jsonl)" if more > 0 else ""
                # Failures that are all soaktop's own configuration say nothing of the server.
                client_only = all(x.outcome == "client" for x in g.failures)
                out.append(
                    Reason(
                        code="gate_client_error" if client_only else "gate_failed",
                        effect="invalid" if client_only else "failed",
                        message=f"{PHASE_WORDS[phase]} {suite} {g.passed}/{g.total}: {shown}{tail}",
                    )
                )
            if g.not_run:
                out.append(
                    Reason(
                        code="gate_cut_short",
                        effect="note" if f.aborted else "invalid",
                        message=f"{PHASE_WORDS[phase]} {suite}: {g.not_run} of {g.total} tasks "
                        "never ran (the phase was cut short)",
                    )
                )
            for x in g.passed_on_retry:
                out.append(
                    Reason(
                        code="gate_passed_on_retry",
                        effect="note",
                        message=f"{PHASE_WORDS[phase]} {x.label} passed only after "
                        f"{x.attempts - 1} retries; first attempt: {x.reason} ({x.outcome})",
                    )
                )
    if f.before_blocked:
        before_failures = [x for g in f.gates.get("before", {}).values() for x in g.failures]
        client_only = bool(before_failures) and all(x.outcome == "client" for x in before_failures)
        out.append(
            Reason(
                code="before_gates_failed",
                effect="invalid" if client_only else "failed",
                message="the before-load gates failed, so no load was run "
                "(--force-load soaks anyway)",
            )
        )
    elif f.force_load and any(g.failures for g in f.gates.get("before", {}).values()):
        out.append(
            Reason(
                code="force_load",
                effect="note",
                message="the load ran despite failed before-load gates (--force-load)",
            )
        )
    if f.gates_configured and not f.preflight_errors:
        for phase in ("before", "after"):
            if phase not in f.gates and not (phase == "after" and f.before_blocked):
                out.append(
                    Reason(
                        code="gates_not_run",
                        effect="note",
                        message=f"the {PHASE_WORDS[phase]} gates did not run",
                    )
                )
    return out


def _health_reasons(f: RunFacts) -> list[Reason]:
    h = f.health
    if h is None:
        return []
    out: list[Reason] = []
    if h.loop_lag_p99_s is not None and h.loop_lag_p99_s > f.max_loop_lag_s:
        out.append(
            Reason(
                code="client_overloaded",
                effect="invalid",
                message=(
                    f"client event-loop lag p99 {h.loop_lag_p99_s * 1000:.0f} ms exceeds "
                    f"{f.max_loop_lag_s * 1000:.0f} ms: latencies include the client's own "
                    "queueing"
                ),
            )
        )
    if h.cpu_over_limit_s is not None and h.cpu_over_limit_s >= f.client_overload_s:
        out.append(
            Reason(
                code="client_cpu_overloaded",
                effect="invalid",
                message=(
                    f"the client's CPU stayed above {f.max_client_cpu_percent:g}% of a core for "
                    f"{h.cpu_over_limit_s:.0f} s (limit {f.client_overload_s:g} s): it could not "
                    "keep up, and its timings include its own queueing"
                ),
            )
        )
    out += _behind_reasons(f, h)
    if h.in_flight_short_s is not None and h.in_flight_short_s >= f.client_overload_s:
        out.append(
            Reason(
                code="in_flight_short",
                effect="invalid",
                message=(
                    f"fewer requests were in flight than workers started for "
                    f"{h.in_flight_short_s:.0f} s while issuing (as few as "
                    f"{h.in_flight_short_min}; limit {f.client_overload_s:g} s): the client "
                    "did not hold the requested load"
                ),
            )
        )
    return out


BEHIND_MIN_SAMPLES = 500
"""Sampled reads the whole load's behind share needs before it can judge alone (about a
second of a 256-stream load at one sample per 32 token events)."""


def _behind_reasons(f: RunFacts, h: ClientHealth) -> list[Reason]:
    """``client_behind`` (invalid): the client read slower than the server wrote — for a
    stretch of ``client_overload_s`` seconds each above ``max_client_behind``, or over the
    whole load. The whole load's share also counts because a load whose streams start and
    end together dips below the bound for a second now and then (the streak restarts),
    though it is behind on most of its reads: 89% of 30,000 samples read "ok" before."""
    limit = f"limit {f.max_client_behind:.0%}"
    shards = max(1, len(f.shards))  # a run in one process lists none
    advice = (
        "it read slower than the server wrote, so its ITL/TTFT include its own queueing "
        f"— {add_shard_words(shards)} (or lower the load)"
    )
    if h.behind_over_limit_s is not None and h.behind_over_limit_s >= f.client_overload_s:
        share = h.behind_fraction_in_streak
        words = (
            f"the client found data already waiting in the socket on {_percent(share)} of "
            f"sampled reads for {h.behind_over_limit_s:.0f} s ({limit} for "
            f"{f.client_overload_s:g} s): {advice}"
        )
    elif (
        h.behind_fraction is not None
        and (h.behind_samples or 0) >= BEHIND_MIN_SAMPLES
        and h.behind_fraction > f.max_client_behind
    ):
        words = (
            f"the client found data already waiting in the socket on "
            f"{_percent(h.behind_fraction)} of {h.behind_samples:,} sampled reads over the "
            f"load ({limit}): {advice}"
        )
    else:
        return []
    return [Reason(code="client_behind", effect="invalid", message=words)]


def add_shard_words(shards: int) -> str:
    """The advice for a client behind the server's writes, in a run of ``shards`` load
    processes (the verdict's ``client_behind`` and the live event say the same)."""
    return f"the client is the bottleneck: rerun with --shards {shards + 1}"


def _percent(share: float | None) -> str:
    """A share as an operator reads it (``63%``; ``?`` when unknown)."""
    return "?" if share is None else f"{share:.0%}"
