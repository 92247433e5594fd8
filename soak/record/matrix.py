"""The matrix profile (a scout): cells of (input tokens × concurrency), each run as R
repetitions of K timed requests after a warm-up that is never timed.

This module holds the specification (``--matrix "input=6000,25000 concurrency=1,4 reps=3
requests=4"``) and the record's ``matrix`` section. The record keeps every timed
request's figures per repetition, so ``soaktop decide`` can pool repetitions per cell and
anyone can recompute a median from the record alone.

Statistics are labelled: ``e2e_median_s`` is the ordinary median (the mean of the two
middle values for an even count), ``e2e_p50_nearest_s`` the nearest-rank p50 (an observed
value) — seed 004 keeps both.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadgen.stats import percentile

MATRIX_KEYS = ("input", "concurrency", "reps", "requests", "warmup")


class MatrixError(ValueError):
    """A matrix specification that cannot be run; the message names the key and value."""


class MatrixSpec(BaseModel):
    """What to run: every (input, concurrency) pair is one cell, in this order."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: list[int] = Field(min_length=1)
    """Target input tokens per prompt (synthetic, calibrated with the server's /tokenize)."""
    concurrency: list[int] = Field(min_length=1)
    reps: int = Field(3, ge=1)
    """Timed repetitions per cell."""
    requests: int = Field(4, ge=1)
    """Timed requests per repetition (closed loop at the cell's concurrency)."""
    warmup: int = Field(1, ge=0)
    """Untimed requests per worker before a cell's first repetition (0: none)."""

    def cells(self) -> list[tuple[int, int]]:
        """(input tokens, concurrency) per cell, input-major."""
        return [(n, c) for n in self.input_tokens for c in self.concurrency]

    def text(self) -> str:
        """The specification as the command line takes it."""
        return (
            f"input={','.join(map(str, self.input_tokens))} "
            f"concurrency={','.join(map(str, self.concurrency))} reps={self.reps} "
            f"requests={self.requests} warmup={self.warmup}"
        )


def parse_matrix(spec: str) -> MatrixSpec:
    """``"input=6000,25000 concurrency=1,4 reps=3 requests=4 [warmup=1]"`` → MatrixSpec."""
    values: dict[str, list[int]] = {}
    for part in spec.split():
        key, sep, raw = part.partition("=")
        if not sep or key not in MATRIX_KEYS:
            raise MatrixError(
                f"matrix: {part!r} is not KEY=VALUE with KEY one of {', '.join(MATRIX_KEYS)}"
            )
        try:
            nums = [int(v) for v in raw.split(",") if v.strip()]
        except ValueError:
            raise MatrixError(f"matrix: {key}={raw!r} must be whole numbers") from None
        if not nums or any(n < (0 if key == "warmup" else 1) for n in nums):
            raise MatrixError(
                f"matrix: {key}={raw!r} must be {'≥ 0' if key == 'warmup' else '≥ 1'}"
            )
        if key in ("reps", "requests", "warmup") and len(nums) != 1:
            raise MatrixError(f"matrix: {key}={raw!r} takes one number")
        values[key] = nums
    for key in ("input", "concurrency"):
        if key not in values:
            raise MatrixError(f"matrix: {spec!r} has no {key}=N[,N...]")
    extra: dict[str, Any] = {k: values[k][0] for k in ("reps", "requests", "warmup") if k in values}
    return MatrixSpec(input_tokens=values["input"], concurrency=values["concurrency"], **extra)


class RepResult(BaseModel):
    """One timed repetition of one cell."""

    model_config = ConfigDict(extra="forbid")

    rep: int
    """1-based."""
    completed: int = 0
    failed: int = 0
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    start_s: float | None = None
    end_s: float | None = None
    e2e_s: list[float] = Field(default_factory=list)
    """E2E of every completed request, in completion order."""
    ttft_content_s: list[float | None] = Field(default_factory=list)
    """Sent → first visible content, per completed request (None: no content came)."""
    ttft_first_output_s: list[float | None] = Field(default_factory=list)
    """Sent → first output token, reasoning or content, per completed request."""
    input_tokens: list[int | None] = Field(default_factory=list)
    """The server's usage.prompt_tokens per completed request (the actual input)."""
    output_tokens: list[int | None] = Field(default_factory=list)
    max_running: float | None = None
    """Highest engine occupancy (running requests, all endpoints) sampled during the rep."""
    min_free_mib: float | None = None
    """Lowest free GPU memory (any GPU) sampled during the rep; None without GPU telemetry."""
    reconciliation: dict[str, Any] = Field(default_factory=dict)
    """Client vs server counters for this repetition (``soak.judge.reconcile``)."""


class CellResult(BaseModel):
    """One cell: its repetitions and the pooled figures over all of them."""

    model_config = ConfigDict(extra="forbid")

    index: int
    input_tokens_target: int
    concurrency: int
    prompt_pool_sha256: str
    """Same prompts in the same order across arms ⇔ same hash (``--pool-seed``)."""
    warmup_requests: int = 0
    warmup_failed: int = 0
    reps: list[RepResult] = Field(default_factory=list)
    completed: int = 0
    failed: int = 0
    e2e_median_s: float | None = None
    """Ordinary median of the pooled E2E of every repetition."""
    e2e_p50_nearest_s: float | None = None
    """Nearest-rank p50 of the same values."""
    ttft_content_median_s: float | None = None
    ttft_first_output_median_s: float | None = None
    input_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    max_running: float | None = None
    min_free_mib: float | None = None

    @property
    def label(self) -> str:
        """``~6000 / C4``."""
        return f"~{self.input_tokens_target} / C{self.concurrency}"


class MatrixSummary(BaseModel):
    """The record's ``matrix`` section."""

    model_config = ConfigDict(extra="forbid")

    spec: MatrixSpec
    max_tokens: int
    reasoning: str | None = None
    cells: list[CellResult] = Field(default_factory=list)
    not_run: list[str] = Field(default_factory=list)
    """Cells the run never reached (stopped or aborted first), by label."""
    barrier_failures: list[str] = Field(default_factory=list)
    """Batches whose workers could not all start (nothing of them was sent)."""


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def pool_cell(cell: CellResult) -> CellResult:
    """The cell with its pooled figures recomputed from its repetitions."""
    e2e = [v for r in cell.reps for v in r.e2e_s]
    content = [v for r in cell.reps for v in r.ttft_content_s if v is not None]
    first = [v for r in cell.reps for v in r.ttft_first_output_s if v is not None]
    inputs = [v for r in cell.reps for v in r.input_tokens if v is not None]
    outputs = [v for r in cell.reps for v in r.output_tokens if v is not None]
    running = [r.max_running for r in cell.reps if r.max_running is not None]
    free = [r.min_free_mib for r in cell.reps if r.min_free_mib is not None]
    return cell.model_copy(
        update={
            "completed": sum(r.completed for r in cell.reps),
            "failed": sum(r.failed for r in cell.reps),
            "e2e_median_s": _median(e2e),
            "e2e_p50_nearest_s": (
                percentile(np.sort(np.asarray(e2e)), 50, "nearest-rank") if e2e else None
            ),
            "ttft_content_median_s": _median(content),
            "ttft_first_output_median_s": _median(first),
            "input_tokens_mean": statistics.fmean(inputs) if inputs else None,
            "output_tokens_mean": statistics.fmean(outputs) if outputs else None,
            "max_running": max(running) if running else None,
            "min_free_mib": min(free) if free else None,
        }
    )
