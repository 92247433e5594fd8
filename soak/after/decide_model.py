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
"""A cell with an arm of fewer pooled timed requests than this is inconclusive
(``few_samples``)."""
MIN_REPS = 3
"""… and so is one with an arm of fewer repetitions (seed 004 ran three)."""
MAX_OUTPUT_SPREAD = 0.10
"""Two mean output lengths more than 10% apart ((max − min) / min) are different amounts of
work: a candidate that far from *both* controls makes its cell inconclusive
(``output_length_differs``); three arms that far apart are a caveat (seed 004: natural
output length)."""
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
    beats_both: bool = False
    """The candidate's median is at least ``min_gain`` below both controls' — whether or
    not the cell is conclusive (an inconclusive cell that beats both is still no win)."""
    win: bool = False
    """The cell counts as a material win: ``verdict == "win"``."""
    reliable: bool = True
    """The controls agree within ``min_gain`` (False: ``controls_disagree``, inconclusive)."""
    verdict: Literal["win", "no win", "inconclusive", "no data"] = "no data"
    """``win`` counts toward the decision; ``inconclusive`` never does, whatever its gains
    (``inconclusive_reasons`` says why); ``no data``: an arm completed no timed request."""
    inconclusive_reasons: list[str] = Field(default_factory=list)
    """Why the cell cannot decide, in this order: ``controls_disagree`` (the controls are
    more than ``min_gain`` apart), ``output_length_differs`` (the candidate's mean output
    tokens are more than ``MAX_OUTPUT_SPREAD`` from both controls'), ``few_samples`` (an arm
    has fewer than ``MIN_POOLED_REQUESTS`` pooled requests or ``MIN_REPS`` repetitions)."""


class Caveat(BaseModel):
    """Something that limits what the decision shows."""

    model_config = ConfigDict(extra="forbid")

    code: str
    """restoration_drift, restoration_unchecked, candidate_identical_recipe,
    few_samples, output_length_differs, gates_failed, request_failures,
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


class Restoration(BaseModel):
    """Is the restored run the original? What
    :func:`soak.after.restoration.check_restoration` compared between the before and the
    restored run (served model, endpoint count, every stated or declared recipe fact, the
    GPU set)."""

    model_config = ConfigDict(extra="forbid")

    matched: bool = True
    """Nothing that both runs state differed."""
    checked: list[str] = Field(default_factory=list)
    """What matched, one item per fact: ``engine version: version 0.32.0``."""
    mismatches: list[str] = Field(default_factory=list)
    """What differed, both values named: ``engine version: original version 0.32.0,
    restored version 0.33.0``."""
    unchecked: list[str] = Field(default_factory=list)
    """What could not be compared (no identity, no GPU identity in a run)."""
    allowed_drift: bool = False
    """``--allow-restoration-drift`` was given: a mismatch is a ``restoration_drift``
    caveat that blocks promotion instead of a refusal."""
    summary: str = ""
    """One sentence, as seed 004 writes it: ``Original configuration restored: identity
    checks passed (version 0.32.0, 32 slots/replica, …)``."""


class Decision(BaseModel):
    """What ``soaktop decide`` prints (``--json``) and renders."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["promote", "retain original"]
    """``promote`` needs ``min_wins`` material wins and a restored run that is the
    original; anything else retains it."""
    card: str = ""
    """The result card's line: ``0/4 material wins (1 inconclusive) — at least 10% lower
    pooled median E2E required against both controls: retain the original``."""
    wins: int
    """Cells that are material wins (conclusive cells only)."""
    inconclusive: int = 0
    """Cells that are inconclusive (never counted as wins)."""
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
    run_caveats: list[Caveat] = Field(default_factory=list)
    """What the runs themselves cannot show, from how they were made (the records'
    ``caveats``: a small natural-output scout, closed loop, one run per arm, …), one per
    code in the before run's words; seed 004's "Important caveat"."""
    engine: EngineFacts = Field(default_factory=EngineFacts)
    restoration: Restoration = Field(default_factory=Restoration)
    candidate_changes: list[str] = Field(default_factory=list)
    """What the candidate's recipe changed against the original (before) run:
    ``64 slots/replica (original 32 slots/replica)``; empty when nothing stated or declared
    differs (a ``candidate_identical_recipe`` caveat when both stated something)."""
    promotion_blocked: str | None = None
    """Why no win can be attributed to the candidate whatever the cells say (the restored
    run drifted from the original, or could not be checked); None when nothing blocks."""

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
