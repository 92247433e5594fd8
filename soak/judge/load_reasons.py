"""The load's reasons: what the load summary (``requests.jsonl``) says about the run.

A load that never started (the barrier was not reached) says only that. Otherwise the
failures against ``max_failures``, what the server's answers looked like (usage, empty
answers, stale connections), how the load ended (drain deadline, cancellation, backoff)
and whether soaktop itself held it (worker errors, counters that do not add up).
"""

from __future__ import annotations

from soak.record.models import LoadSummary, Reason

CLASS_WORDS = {
    "empty_stream": "HTTP 200 streams that ended with [DONE] but carried no output",
    "impossible_usage": "usage numbers that cannot be true, left out of the token totals",
    "contract_error": "complete answers that broke their workload class's contract (JSON "
    "schema, tool call): contract failures, not availability ones",
}
"""Failure classes whose bare name does not say what happened: the reason adds the words."""


def load_reasons(load: LoadSummary | None, max_failures: int, aborted: bool) -> list[Reason]:
    """Every reason the load summary gives (``aborted``: the operator or a signal stopped
    the run, so a load that completed nothing is not INVALID for it)."""
    if load is None:
        return []
    if not load.barrier_released:
        return [_barrier_not_reached(load)]
    return (
        _outcome_reasons(load, max_failures, aborted)
        + _answer_notes(load)
        + _ending_reasons(load)
        + _soaktop_reasons(load)
    )


def _barrier_not_reached(load: LoadSummary) -> Reason:
    why = "; ".join(f"{n}× {msg}" for msg, n in load.worker_start_failures.items())
    return Reason(
        code="barrier_not_reached",
        effect="invalid",
        message=(
            f"only {load.workers_started} of {load.requested_concurrency} workers "
            f"started ({why or 'no reason recorded'}); no load was measured"
        ),
    )


def _outcome_reasons(load: LoadSummary, max_failures: int, aborted: bool) -> list[Reason]:
    """Failures beyond the allowance, a clean load, or a load that measured nothing."""
    out: list[Reason] = []
    if load.failed > max_failures:
        by = ", ".join(
            f"{n} {cls} ({CLASS_WORDS[cls]})" if cls in CLASS_WORDS else f"{n} {cls}"
            for cls, n in load.failures_by_class.items()
        )
        allowed = f" (allowed: {max_failures})" if max_failures else ""
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
    if load.completed == 0 and load.failed == 0 and not aborted:
        out.append(
            Reason(
                code="no_completed_requests",
                effect="invalid",
                message="the load window completed no request: nothing was measured",
            )
        )
    return out


def _answer_notes(load: LoadSummary) -> list[Reason]:
    """What the successful answers looked like: usage missing or wrong, empty answers,
    requests resent on a fresh connection."""
    out: list[Reason] = []
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
    return out


def _ending_reasons(load: LoadSummary) -> list[Reason]:
    """How the load ended: requests cut at the drain deadline or cancelled, and pauses
    after failures that made the load lighter than asked."""
    out: list[Reason] = []
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
    return out


def _soaktop_reasons(load: LoadSummary) -> list[Reason]:
    """soaktop's own failures: workers that died, requests issued but never journaled."""
    out: list[Reason] = []
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
