"""The load summary of ``record.json``: what the judged load requests add up to.

Recomputed from ``requests.jsonl`` plus the timing the journal cannot tell by
:func:`soak.record.summary.summarize_load`; the same model holds a slice of the load (a
step's, a workload class's, a turn's: :mod:`soak.record.load_slices`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from loadgen.stats import LatencyStats
from soak.record.shape import AbsentUnlessSet

OPEN_LOOP_FIELDS = (
    "offered_rate",
    "achieved_rate",
    "lateness_s",
    "ttft_from_intended_s",
    "e2e_from_intended_s",
    "held_by_cap",
)
"""The load summary's open-loop figures (``--arrival constant|poisson|gamma`` only)."""


class LoadSummary(AbsentUnlessSet):
    """The load phase: recomputable from ``requests.jsonl`` plus the timing fields."""

    model_config = ConfigDict(extra="forbid")

    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {"sanity_checked", "sanity_by_flag", "sanity_flagged", *OPEN_LOOP_FIELDS}
    )
    """Written only by a load that checked its responses (schema 1.2, not ``--no-sanity``):
    an older record, or an unchecked run, reads as ``sanity_checked`` False. The open-loop
    figures (schema 1.3) only by an open-loop load: a closed loop has no schedule."""

    requested_concurrency: int
    workers_started: int
    worker_start_failures: dict[str, int] = Field(default_factory=dict)
    barrier_released: bool
    barrier_released_at: str | None = None
    """UTC wall time the issue window opened."""
    barrier_wait_s: float | None = None
    issued: int = 0
    """Requests issued in the judged window (a soak warm-up's are journaled apart)."""
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    """In-flight requests soaktop cut (see ``cancel_cause``); journaled with partial timings."""
    cancel_cause: str | None = None
    """``drain deadline`` (the server did not finish them in time) or ``abort`` (operator)."""
    backoffs: int = 0
    """Pauses workers took after failures that came before any token (see config
    failure_backoff_max_s): the load was deliberately lighter than requested then."""
    worker_errors: dict[str, int] = Field(default_factory=dict)
    """Workers lost to an exception inside soaktop (the load ran with fewer workers)."""
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    issue_start_s: float | None = None
    """Seconds since the run origin when the barrier released (the issue window opened)."""
    issue_end_s: float | None = None
    """Seconds since the run origin when issuing stopped."""
    issue_s: float | None = None
    """Issue window: barrier release → stop issuing."""
    drain_s: float | None = None
    elapsed_s: float | None = None
    """issue_s + drain_s: the throughput denominator."""
    stop_reason: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_missing: int = 0
    """Successful requests without a usage block (their tokens are unknown, not estimated)."""
    usage_disagrees: int = 0
    """Successful requests that streamed more token-carrying chunks than
    ``usage.completion_tokens`` + 2 can explain (``loadgen.outcome.usage_disagrees``): the
    usage looks wrong. A note; the totals still use usage as reported."""
    usage_disagrees_example: str | None = None
    """The first such request: its id, chunks and completion tokens."""
    empty_answers: int = 0
    """Successful requests with no token-carrying chunk: the server said the generation
    finished after ≥ 1 completion token (a model that ends at once). Not failures, counted
    so that a server answering everything with nothing shows."""
    stale_connection_retries: int = 0
    """Requests resent once on a fresh connection: the pooled connection they were first
    written to had been closed by the server, before any response byte (see README)."""
    sanity_checked: bool = False
    """The load's responses were checked for sanity (``loadgen.sanity``; off with
    ``--no-sanity``, and in records older than the checks): without it the two counts
    below say nothing, not "0 degenerate"."""
    sanity_by_flag: dict[str, int] = Field(default_factory=dict)
    """Completed load responses per sanity flag (one response may have several)."""
    sanity_flagged: int = 0
    """Completed load responses with at least one sanity flag."""
    output_tokens_per_s: float | None = None
    """output_tokens / elapsed_s (drain included)."""
    output_tokens_per_s_issue_window: float | None = None
    """Output tokens of the judged requests that finished inside the issue window
    (``end_s`` ≤ ``issue_end_s``; a judged request is sent inside it, so each counted one
    lies wholly inside) ÷ ``issue_s``. A request still in flight when issuing stopped adds
    nothing, not even the tokens it had received by then: this counts requests finished in
    the window, not tokens received in it (the journal has no per-token counts)."""
    requests_per_s: float | None = None
    """completed / elapsed_s."""
    ttft_s: LatencyStats = Field(default_factory=LatencyStats)
    e2e_s: LatencyStats = Field(default_factory=LatencyStats)
    itl_s: LatencyStats = Field(default_factory=LatencyStats)
    tpot_s: LatencyStats = Field(default_factory=LatencyStats)
    ttfb_s: LatencyStats = Field(default_factory=LatencyStats)
    """Time to the response headers."""
    first_content_s: LatencyStats = Field(default_factory=LatencyStats)
    """Time to the first visible content (differs from TTFT for reasoning models)."""
    input_tokens_mean: float | None = None
    """Actual input tokens per request (server usage), beside the pool's nominal figure."""
    offered_rate: float | None = None
    """Open loop: the schedule's arrivals in the judged window ÷ ``issue_s`` (``--rate``
    is its mean; a Poisson count strays from it by chance). With ``--turns``, arrivals are
    sessions: this is the session arrival rate."""
    achieved_rate: float | None = None
    """Open loop: arrivals sent in the issue window ÷ ``issue_s``. With ``--turns`` only a
    session's turn 1 is an arrival: its later turns are not counted (compare
    ``offered_rate``, the sessions'; so in ``turns``, the slices of turn 2 on show 0)."""
    lateness_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: actual send − intended send (the client's, or the cap's, lateness), of
    every request: with ``--turns``, every turn (a later turn is due at its previous
    answer's end + think time)."""
    ttft_from_intended_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: intended send → first token, lateness included (no coordinated
    omission: a request the client sent late still counts from when it was due); every
    turn with ``--turns``."""
    e2e_from_intended_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: intended send → stream end."""
    held_by_cap: int | None = None
    """Open loop: arrivals (with ``--turns``, a session's later turns too) that found
    ``max_in_flight`` requests in flight and waited."""
