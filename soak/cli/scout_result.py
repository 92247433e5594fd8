"""What a scout leaves: ``scout.json`` (arms, order, every step, every triple's decision),
``decision.md``, and the decision as text.

Each bracketing triple (original before, candidate, original after) is decided with
``soaktop decide``'s rule (:func:`soak.after.decide.decide`); the scout's decision
combines them conservatively (:func:`combine`): ``promote`` only when every triple
promotes, ``refused`` when any triple could not be decided (or a restored original was
not the original), ``incomplete`` when a run could not be made, else ``retain original``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from soak.after.decide import decide
from soak.after.decide_model import Decision, NotComparable
from soak.after.decide_render import render
from soak.cli.scout_plan import ScoutPlan, Triple
from soak.record.models import RunRecord, write_atomic
from soak.record.redact import Redactor
from soak.safe_text import safe_line

Outcome = Literal["running", "promote", "retain original", "refused", "incomplete"]

EXIT_DECIDED = 0
EXIT_ARM_FAILED = 1
EXIT_REFUSED = 2


class ArmFacts(BaseModel):
    """An arm as the scout ran it (its command scrubbed of secrets)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: str
    recipe: dict[str, str] = Field(default_factory=dict)


class StepResult(BaseModel):
    """One step: the switch, the identity check, the run."""

    model_config = ConfigDict(extra="forbid")

    n: int
    arm: str
    role: str
    switch_log: str | None = None
    """The switch's log, relative to the scout directory (as every path here)."""
    switch_command_s: float | None = None
    ready_s: float | None = None
    stated: dict[str, str] = Field(default_factory=dict)
    """The recipe facts the endpoints stated right after the switch
    (:func:`soak.record.recipe.recipe_facts` of the probe)."""
    identity_check: str | None = None
    """What the check before the load found, in one sentence."""
    restoration_checked: list[str] = Field(default_factory=list)
    restoration_mismatches: list[str] = Field(default_factory=list)
    restoration_unchecked: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    run_dir: str | None = None
    """``<n>-<arm>/<run id>``, relative to the scout directory."""
    run_id: str | None = None
    status: str | None = None
    exit_code: int | None = None
    problem: str | None = None
    """Why this step stopped the scout (None: it did not)."""


class TripleResult(BaseModel):
    """One candidate run with its two controls, and what ``decide`` made of them."""

    model_config = ConfigDict(extra="forbid")

    before: int
    candidate: int
    restored: int
    decision: Decision | None = None
    refused: list[str] = Field(default_factory=list)
    """Why ``decide`` could not decide (the runs cannot be compared)."""


class ScoutSummary(BaseModel):
    """``scout.json``: rewritten after every step, so a scout that dies leaves what ran."""

    model_config = ConfigDict(extra="forbid")

    scout_id: str
    scout_dir: str
    started_at: str
    ended_at: str | None = None
    arms: list[ArmFacts]
    order: str
    order_asked: str
    seed: int | None = None
    matrix: str
    min_gain_pct: float
    min_wins: int | None
    allow_restoration_drift: bool
    switch_timeout_s: float
    steps: list[StepResult] = Field(default_factory=list)
    triples: list[TripleResult] = Field(default_factory=list)
    decision: Outcome = "running"
    outcome: str = ""
    """The decision in one sentence, with why."""
    exit_code: int | None = None

    def json_bytes(self, red: Redactor) -> bytes:
        """``scout.json``'s bytes, through the run's redactor (the API key always; with
        ``--redact`` every private value)."""
        data = red.json_line(self.model_dump_json(indent=2).encode(), orjson.OPT_INDENT_2)
        return data + b"\n"

    def write(self, scout_dir: Path, red: Redactor) -> None:
        """Write ``scout.json`` atomically."""
        write_atomic(scout_dir / "scout.json", self.json_bytes(red))


def now_iso() -> str:
    """UTC wall time, as the records write it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def decide_triple(
    plan: ScoutPlan, triple: Triple, records: dict[int, RunRecord], dirs: dict[int, str]
) -> TripleResult:
    """``decide`` over one triple's three records."""
    out = TripleResult(before=triple.before, candidate=triple.candidate, restored=triple.restored)
    steps = {"before": triple.before, "candidate": triple.candidate, "restored": triple.restored}
    try:
        out.decision = decide(
            records[triple.before],
            records[triple.candidate],
            records[triple.restored],
            min_gain=plan.min_gain,
            min_wins=plan.min_wins,
            run_dirs={role: dirs[n] for role, n in steps.items()},
            allow_restoration_drift=plan.allow_restoration_drift,
        )
    except NotComparable as e:
        out.refused = list(e.problems)
    except ValueError as e:
        out.refused = [str(e)]
    return out


def combine(triples: list[TripleResult], planned: int) -> tuple[Outcome, str, int]:
    """The scout's decision from its triples: (decision, sentence, exit code)."""
    refused = [t for t in triples if t.refused]
    if refused:
        first = refused[0]
        return (
            "refused",
            f"refused: the runs {first.before}, {first.candidate}, {first.restored} cannot be "
            f"compared: {'; '.join(first.refused)}",
            EXIT_REFUSED,
        )
    if len(triples) < planned:
        return (
            "incomplete",
            f"incomplete: {len(triples)} of {planned} candidate runs have both controls",
            EXIT_ARM_FAILED,
        )
    decisions = [t.decision for t in triples if t.decision is not None]
    promoting = sum(d.decision == "promote" for d in decisions)
    cards = "; ".join(
        f"triple {i}: {d.card or d.reasons[0]}" if len(decisions) > 1 else d.card or d.reasons[0]
        for i, d in enumerate(decisions, start=1)
    )
    if decisions and promoting == len(decisions):
        return "promote", f"promote the candidate ({cards})", EXIT_DECIDED
    if len(decisions) == 1:
        return "retain original", f"retain the original ({cards})", EXIT_DECIDED
    return (
        "retain original",
        f"retain the original: {promoting} of {len(decisions)} triples promote, promotion "
        f"needs every triple ({cards})",
        EXIT_DECIDED,
    )


def render_scout(summary: ScoutSummary, markdown: bool) -> str:
    """The scout's report: the steps, each triple's decision tables, the decision."""
    h = (lambda t, lvl=2: f"{'#' * lvl} {t}") if markdown else (lambda t, lvl=2: t)
    title = f"Scout {summary.scout_id}: {summary.decision}"
    lines = [h(title, 1) if markdown else f"soaktop scout: {summary.decision}", ""]
    lines += [
        f"Order: {' → '.join(_step_name(s) for s in summary.steps) or '(nothing ran)'}"
        f" (planned {summary.order}); matrix {summary.matrix}",
        "",
    ]
    lines += [h("Steps"), ""]
    for s in summary.steps:
        status = s.status or "not run"
        lines.append(
            f"- {s.n} {s.arm} ({s.role}): {status}" + (f", {s.run_dir}" if s.run_dir else "")
        )
        lines += [f"  - identity before load: {s.identity_check}"] if s.identity_check else []
        lines += [f"  - warning: {w}" for w in s.warnings]
        lines += [f"  - stopped the scout: {s.problem}"] if s.problem else []
    for i, t in enumerate(summary.triples, start=1):
        head = f"Triple {i}: runs {t.before}, {t.candidate}, {t.restored}"
        lines += ["", h(head), ""]
        if t.decision is not None:
            body = render(t.decision, markdown=markdown).rstrip("\n").splitlines()
            # two levels down: decide's sections sit under this triple's heading
            lines += [f"##{ln}" if markdown and ln.startswith("#") else ln for ln in body]
        else:
            lines += ["Refused: these runs cannot be compared:", *(f"- {p}" for p in t.refused)]
    lines += ["", h(f"Decision: {summary.decision}"), "", summary.outcome]
    # steps quote servers (their errors, the models they list): shown, never obeyed
    return "\n".join(safe_line(ln) for ln in lines) + "\n"


def _step_name(s: StepResult) -> str:
    return f"{s.n}-{s.arm}"
