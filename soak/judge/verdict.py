"""The whole-run verdict: PASSED, FAILED, INVALID or ABORTED, with reasons (DESIGN.md §6).

Every finding becomes a ``Reason``; the status follows from the strongest effect:
aborted > invalid > failed > passed. Findings never cancel each other out: an INVALID
load measurement still lists a server failure seen during it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from probes.gates import PHASE_WORDS, GateFailure, SuiteGate
from soak.record.models import ClientHealth, LoadSummary, Reason, Status

# Failure classes whose bare name does not say what happened: the reason adds the words.
_CLASS_WORDS = {
    "empty_stream": "HTTP 200 streams that ended with [DONE] but carried no output",
    "impossible_usage": "usage numbers that cannot be true, left out of the token totals",
}

_PRECEDENCE = (
    ("aborted", Status.ABORTED),
    ("invalid", Status.INVALID),
    ("failed", Status.FAILED),
)


@dataclass
class Findings:
    """Everything the verdict depends on, gathered by the runner or by recover."""

    preflight_errors: list[str] = field(default_factory=list)
    load: LoadSummary | None = None
    aborted: str | None = None
    """Why the operator or a signal stopped the run, if they did."""
    health: ClientHealth | None = None
    max_failures: int = 0
    max_loop_lag_s: float = 0.5
    client_overload_s: float = 10.0
    """How long client CPU overload or in-flight shortfall may last before INVALID."""
    max_client_cpu_percent: float = 95.0
    gates: dict[str, dict[str, SuiteGate]] = field(default_factory=dict)
    """``{phase: {suite: SuiteGate}}`` from probes.jsonl."""
    gates_configured: list[str] = field(default_factory=list)
    """Suites the run was asked to gate on (empty: no gates)."""
    before_blocked: bool = False
    """The before-load gates failed, so no load was run."""
    force_load: bool = False
    extra: list[Reason] = field(default_factory=list)
    """Reasons from later layers (thresholds, faults)."""


def _load_reasons(f: Findings) -> list[Reason]:
    load = f.load
    if load is None:
        return []
    out: list[Reason] = []
    if not load.barrier_released:
        why = "; ".join(f"{n}× {msg}" for msg, n in load.worker_start_failures.items())
        out.append(
            Reason(
                code="barrier_not_reached",
                effect="invalid",
                message=(
                    f"only {load.workers_started} of {load.requested_concurrency} workers "
                    f"started ({why or 'no reason recorded'}); no load was measured"
                ),
            )
        )
        return out
    if load.failed > f.max_failures:
        by = ", ".join(
            f"{n} {cls} ({_CLASS_WORDS[cls]})" if cls in _CLASS_WORDS else f"{n} {cls}"
            for cls, n in load.failures_by_class.items()
        )
        allowed = f" (allowed: {f.max_failures})" if f.max_failures else ""
        out.append(
            Reason(
                code="load_failures",
                effect="failed",
                message=f"{load.failed} of {load.issued} load requests failed: {by}{allowed}",
            )
        )
    if load.failed == 0 and load.completed > 0:
        out.append(
            Reason(
                code="load_clean",
                effect="note",
                message=f"load: 0 failures in {load.issued:,} requests",
            )
        )
    if load.completed == 0 and load.failed == 0 and f.aborted is None:
        out.append(
            Reason(
                code="no_completed_requests",
                effect="invalid",
                message="the load window completed no request: nothing was measured",
            )
        )
    if load.usage_missing:
        out.append(
            Reason(
                code="usage_missing",
                effect="note",
                message=(
                    f"{load.usage_missing} successful requests had no usage block: their "
                    "tokens are unknown (not estimated)"
                ),
            )
        )
    if load.usage_disagrees:
        out.append(
            Reason(
                code="usage_disagrees",
                effect="note",
                message=(
                    f"{load.usage_disagrees} successful requests streamed more token chunks "
                    f"than their usage reports (e.g. {load.usage_disagrees_example}): the "
                    "server's usage looks wrong; token totals use it as reported"
                ),
            )
        )
    if load.empty_answers:
        out.append(
            Reason(
                code="empty_answers",
                effect="note",
                message=(
                    f"{load.empty_answers} successful requests streamed no token: the server "
                    "said each generation finished (finish_reason, usage ≥ 1 token) at once"
                ),
            )
        )
    if load.stale_connection_retries:
        out.append(
            Reason(
                code="stale_connection_retries",
                effect="note",
                message=(
                    f"{load.stale_connection_retries} requests were resent once on a fresh "
                    "connection: the server had closed the pooled connection before "
                    "answering (no keep-alive, or its keep-alive timeout); a resend is no "
                    "failure in itself, and is timed from the resend"
                ),
            )
        )
    if load.cancelled and load.cancel_cause == "drain deadline":
        out.append(
            Reason(
                code="drain_deadline",
                effect="failed",
                message=(
                    f"{load.cancelled} requests did not finish within the drain deadline "
                    "(a stalled or overloaded server); they were cut by soaktop"
                ),
            )
        )
    elif load.cancelled:
        out.append(
            Reason(
                code="cancelled",
                effect="note",
                message=(
                    f"{load.cancelled} in-flight requests were cancelled by the {load.cancel_cause}"
                ),
            )
        )
    if load.backoffs:
        out.append(
            Reason(
                code="backoff",
                effect="note",
                message=(
                    f"workers paused {load.backoffs} times after failures that came before any "
                    "token (a refusing or dead server): the load was lighter than requested then"
                ),
            )
        )
    if load.worker_errors:
        why = "; ".join(f"{n}× {msg}" for msg, n in load.worker_errors.items())
        out.append(
            Reason(
                code="worker_errors",
                effect="invalid",
                message=f"load workers died inside soaktop ({why}): the load was not held",
            )
        )
    accounted = load.completed + load.failed + load.cancelled
    if load.issued != accounted:
        out.append(
            Reason(
                code="counters_inconsistent",
                effect="invalid",
                message=(
                    f"{load.issued} requests issued but {accounted} journaled "
                    f"({load.completed} completed, {load.failed} failed, "
                    f"{load.cancelled} cancelled)"
                ),
            )
        )
    return out


FAILURES_SHOWN = 3
"""Failed probes named in one gate reason; the rest are counted."""


def _describe_failure(g: GateFailure) -> str:
    when = f" round {g.round} at {g.t_s:.0f} s" if g.round is not None else ""
    return f"{g.label}{when} {g.reason} ({g.outcome})"


def gate_reasons(f: Findings) -> list[Reason]:
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


def _health_reasons(f: Findings) -> list[Reason]:
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


def decide(f: Findings) -> tuple[Status, list[Reason]]:
    """The status and the reasons, strongest first."""
    reasons = [Reason(code="preflight", effect="failed", message=m) for m in f.preflight_errors]
    if f.aborted is not None:
        reasons.append(Reason(code="aborted", effect="aborted", message=f.aborted))
    reasons += _load_reasons(f) + gate_reasons(f) + _health_reasons(f) + f.extra
    order = {"aborted": 0, "invalid": 1, "failed": 2, "note": 3}
    reasons.sort(key=lambda r: order[r.effect])
    return status_of(reasons), reasons


def status_of(reasons: list[Reason]) -> Status:
    """The status that a list of reasons implies (the strongest effect)."""
    effects = {r.effect for r in reasons}
    for effect, status in _PRECEDENCE:
        if effect in effects:
            return status
    return Status.PASSED
