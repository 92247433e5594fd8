"""The typed result of ``soaktop decide`` and how its numbers read.

The rule that fills it is :mod:`soak.after.decide` (its docstring states it); the text and
markdown layout is :mod:`soak.after.decide_render`, the HTML page
:mod:`soak.after.report.decide_page`. Every one of them reads the same models, so a figure
shown in one place is the figure decided on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ROLES = ("before", "candidate", "restored")
Role = Literal["before", "candidate", "restored"]
ROLE_TITLES = {
    "before": "Original before",
    "candidate": "Candidate",
    "restored": "Original restored",
}

DEFAULT_MIN_GAIN = 0.10
"""Seed 004's predeclared requirement: at least 10% lower pooled median E2E."""
DEFAULT_MIN_WINS = 1
MIN_POOLED_REQUESTS = 5
"""A cell's arm with fewer pooled timed requests than this gets the few-samples caveat."""
MIN_REPS = 3
"""… and so does one with fewer repetitions (seed 004 ran three)."""
MAX_OUTPUT_SPREAD = 0.10
"""Mean output tokens of the three arms more than 10% apart ((max − min) / min): E2E then
compares different amounts of work (seed 004: natural output length)."""
TOLERANCE = 1e-9
"""Relative tolerance at the rule's boundaries (float representation, not statistics)."""


class NotComparable(ValueError):
    """The three runs cannot be compared; ``problems`` says exactly what differs."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class CellArm(BaseModel):
    """One arm of one cell, pooled over its repetitions."""

    model_config = ConfigDict(extra="forbid")

    e2e_median_s: float | None = None
    """Ordinary median of every repetition's timed E2E (the decision statistic)."""
    e2e_p50_nearest_s: float | None = None
    """Nearest-rank p50 of the same values (an observed value; shown, not decided on)."""
    requests: int = 0
    """Pooled timed requests with an E2E (completed)."""
    reps: int = 0
    failed: int = 0
    input_tokens_mean: float | None = None
    output_tokens_mean: float | None = None


class CellDecision(BaseModel):
    """One cell (input tokens × concurrency): the three arms and the verdict."""

    model_config = ConfigDict(extra="forbid")

    label: str
    """``~6K/C4``: actual input tokens (the before arm's mean), as seed 004 labels its
    rows; ``~8000 target/C4`` when no arm recorded the actual input."""
    input_tokens_target: int
    concurrency: int
    before: CellArm
    candidate: CellArm
    restored: CellArm
    gain_vs_before_pct: float | None = None
    """100 × (before − candidate) / before: positive = candidate faster."""
    gain_vs_restored_pct: float | None = None
    """100 × (restored − candidate) / restored: positive = candidate faster."""
    controls_apart_pct: float | None = None
    """100 × (slower − faster control) / slower control."""
    win: bool = False
    """The candidate met the rule against both controls (reliable or not)."""
    reliable: bool = True
    """The controls agree within ``min_gain``."""
    verdict: Literal["win", "no win", "no data"] = "no data"
    """``win`` counts toward the decision (``reliable`` False adds a caveat, not a veto)."""


class Caveat(BaseModel):
    """Something that limits what the decision shows."""

    model_config = ConfigDict(extra="forbid")

    code: str
    """few_samples, output_length_differs, gates_failed, request_failures,
    reconciliation_gap, run_not_passed, controls_disagree, model_differs,
    different_prompts, matrix_settings_differ, material_regression, no_identity,
    stored_median_differs."""
    message: str


class ArmSummary(BaseModel):
    """One of the three runs."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    run_id: str
    run_dir: str | None = None
    status: str
    model: str | None = None
    label: str | None = None
    """The run's ``--label``, when it had one."""
    completed: int = 0
    """Timed requests completed, all cells."""
    failed: int = 0
    token_slots: int | None = None
    """KV token slots summed over the endpoints (identity; telemetry when identity lacks)."""
    token_slots_partial: bool = False
    """Some endpoints reported no token slots: the sum covers the others only."""
    spec_decode_acceptance_rate: float | None = None
    spec_decode_mean_acceptance_length: float | None = None
    max_running: float | None = None
    """Highest sampled engine occupancy over the cells (not the client concurrency)."""
    min_free_mib: float | None = None
    """Lowest sampled free GPU memory over the cells."""


class EngineFacts(BaseModel):
    """Engine-reported facts beside the latency decision (never part of it)."""

    model_config = ConfigDict(extra="forbid")

    token_slots_vs_before: str | None = None
    """``1,330,579 → 1,844,162 (+38.60%)``: before → candidate."""
    token_slots_vs_restored: str | None = None
    """restored → candidate."""
    spec_decode: bool = False
    """Some arm reported speculative-decoding acceptance."""


class Decision(BaseModel):
    """What ``soaktop decide`` prints (``--json``) and renders."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["promote", "retain original"]
    wins: int
    """Cells that are material wins."""
    cells_total: int
    min_wins: int
    min_gain_pct: float
    rule: str
    before_run_id: str
    candidate_run_id: str
    restored_run_id: str
    arms: list[ArmSummary]
    cells: list[CellDecision]
    reasons: list[str] = Field(default_factory=list)
    """Why: the count, then one sentence per cell."""
    caveats: list[Caveat] = Field(default_factory=list)
    engine: EngineFacts = Field(default_factory=EngineFacts)

    def arm(self, role: Role) -> ArmSummary:
        return next(a for a in self.arms if a.role == role)


# ---------------------------------------------------------------- formatting helpers
# How the model's numbers read, in the text, markdown and HTML reports alike.


def fmt_pct(v: float) -> str:
    """Two decimals; ``+38.60%``/``-40.63%`` when signed."""
    return f"{v:+.2f}%"


def fmt_gain(gain_pct: float | None) -> str:
    """A gain in words, as the seed writes it: ``14.55% faster``, ``9.25% slower``."""
    if gain_pct is None:
        return "n/a"
    if round(gain_pct, 2) == 0:
        return "0.00% (same)"
    return f"{abs(gain_pct):.2f}% {'faster' if gain_pct > 0 else 'slower'}"


def fmt_change(old: int | None, new: int | None) -> str | None:
    """``1,330,579 → 1,844,162 (+38.60%)``."""
    if old is None or new is None:
        return None
    pct = f" ({fmt_pct(100 * (new - old) / old)})" if old else ""
    return f"{old:,} → {new:,}{pct}"


def fmt_gain_limit(gain: float) -> str:
    """0.1 → ``10%``."""
    return f"{100 * gain:g}%"
