"""``soaktop decide``: promote a candidate or retain the original, from three matrix runs.

A scout runs the original (``before``), the candidate, and the original again
(``restored``), each as the same matrix of cells (input tokens × concurrency) with the same
prompts. This module compares the three records and makes the decision seed 004 made by
hand ("Cache-layout and DFlash scouts: retain the current configuration").

The rule (seed 004: "At least 10% lower pooled median E2E required against both
controls"; "Material latency wins 0/4 workload groups" → "Retain original"):

* **Statistic.** Per cell and arm, every repetition's timed E2E values are pooled
  (``soak.record.matrix.pool_cell``) and their ordinary median is the decision statistic. The
  nearest-rank p50 of the same values is shown beside it, labelled, never decided on.
* **Material win.** A cell is a material win when the candidate's pooled median is at
  least ``min_gain`` lower than *each* control: ``candidate <= control × (1 − min_gain)``
  for the before and the restored control. The boundary is inclusive (exactly 10% lower
  wins, 9.99% does not), with a relative tolerance of 1e-9 so that the float product
  ``control × 0.9`` does not decide a tie. The gain shown is
  ``(control − candidate) / control``: positive = the candidate is faster. Seed 004's
  ~6K/C4 DFlash cell: 14.55% faster than restored, only 1.96% faster than before → not a
  win.
* **Inconclusive cells.** A cell is *inconclusive* — never a win, whatever its gains — when
  it cannot resolve the gain asked for (the issue: decide had promoted on a cell it had
  itself marked unreliable):

  - ``controls_disagree``: the two controls measure the same configuration, yet the faster
    one is *more than* ``min_gain`` below the slower one (``(max − min) / max >
    min_gain``): the machine drifted by more than the effect asked for;
  - ``output_length_differs``: the candidate's mean output tokens are more than
    ``MAX_OUTPUT_SPREAD`` (10%, ``(max − min) / min``) from *both* controls' — E2E then
    compares different amounts of work (the issue's 24 tokens against 37 and 46; a
    candidate within 10% of either control is not);
  - ``few_samples``: an arm has fewer than ``MIN_POOLED_REQUESTS`` pooled requests or
    fewer than ``MIN_REPS`` repetitions.

  A cell without a completed timed request in some arm is ``no data`` (no verdict, not a
  win). Otherwise it is ``win`` or ``no win`` by the material-win rule.
* **Restoration.** The restored arm is a control only when it is the original: before
  anything else, :func:`soak.after.restoration.check_restoration` compares the before and
  the restored run (served model and root, endpoint count, every recipe fact either run
  stated or declared — version, slots per replica, GPU memory target, KV token slots, … —
  and the GPU set). Any mismatch is a refusal (:class:`NotComparable`, one problem per
  mismatch: "the restored run is not the original: …"). With
  ``allow_restoration_drift=True`` it is instead a ``restoration_drift`` caveat that
  blocks promotion: the decision is ``retain original`` ("restoration drifted: …, so no
  win can be attributed to the candidate") — a decision, because the operator must act
  and keeping the original is the supported action; the cells' verdicts stay as measured.
  A restored run that could not be checked at all (no identity) blocks promotion the
  same way (``restoration_unchecked``). What the candidate changed against the original
  is listed beside the decision; a candidate whose stated and declared recipe reads the
  same as the original's is a ``candidate_identical_recipe`` caveat.
* **Decision.** ``promote`` when at least ``min_wins`` cells are material wins (conclusive
  cells only) and nothing blocks promotion, else ``retain original``. Seed 004 only shows
  the retain side (0/4 in each trial; "Neither demonstrated a 10% end-to-end latency
  improvement against both … controls"; "A future experiment would need a specific
  workload benefit"), which reads as "one workload group with a material win would have
  been a demonstrated improvement": the default ``min_wins`` is 1; ``min_wins=None``
  requires every cell. The result card's line says it: "0/4 material wins (1
  inconclusive) — at least 10% lower pooled median E2E required against both controls:
  retain the original".

Comparability is checked with the restoration: the three runs must each have a matrix,
the same cells and (unless allowed) the same prompt pool per cell, and be three different
runs; anything else raises :class:`NotComparable`, every problem named at once. A
different model name in the candidate, different matrix settings, failed gates, failed
requests, counter gaps, output lengths that differ across arms, a run that did not pass
and a regression are caveats beside the decision: they explain, the rule decides.

This module composes the decision; its pieces are named for what they hold: the typed
result (:mod:`soak.after.decide_model`), the rule and the pooling
(:mod:`soak.after.decide_rule`), which servers the arms measured
(:mod:`soak.after.decide_identity`), the sentences (:mod:`soak.after.decide_words`), the
caveats (:mod:`soak.after.decide_caveats`) and the text layout
(:mod:`soak.after.decide_render`).
"""

from __future__ import annotations

from typing import Literal

from soak.after.decide_caveats import caveats
from soak.after.decide_identity import (
    candidate_changes,
    identity_caveats,
    promotion_block,
    refusals,
    restoration,
)
from soak.after.decide_model import (
    DEFAULT_MIN_GAIN,
    DEFAULT_MIN_WINS,
    ROLES,
    ArmSummary,
    Caveat,
    CellArm,
    CellDecision,
    Decision,
    EngineFacts,
    NotComparable,
    Restoration,
    Role,
    fmt_change,
)
from soak.after.decide_rule import (
    CellKey,
    RoleCells,
    arm_of_cell,
    cells_of,
    check_comparable,
    judge_cell,
)
from soak.after.decide_words import card_line, cell_reason, rule_words
from soak.after.record_view import config_value
from soak.record.matrix import CellResult
from soak.record.models import RunRecord
from soak.record.telemetry import EngineSummary


def decide(
    before: RunRecord,
    candidate: RunRecord,
    restored: RunRecord,
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    min_wins: int | None = DEFAULT_MIN_WINS,
    allow_different_prompts: bool = False,
    run_dirs: dict[str, str] | None = None,
    allow_restoration_drift: bool = False,
) -> Decision:
    """The decision over three matrix runs (``min_wins=None``: every cell must win).

    Raises :class:`NotComparable` for runs that cannot be compared — a restored run that
    is not the original among them, unless ``allow_restoration_drift`` (then a caveat,
    and never a promotion) — and ``ValueError`` for a ``min_gain`` outside (0, 1) or a
    ``min_wins`` outside 1..cells."""
    if not 0 < min_gain < 1:
        raise ValueError(f"min_gain {min_gain!r} must be between 0 and 1 (exclusive)")
    runs: dict[str, RunRecord] = {"before": before, "candidate": candidate, "restored": restored}
    rest = restoration(before, restored, allow_restoration_drift)
    order = _comparable_cells(runs, allow_different_prompts, rest)
    n = len(order)
    need = n if min_wins is None else min_wins
    if not 1 <= need <= n:
        raise ValueError(f"min_wins {need} must be between 1 and the {n} cells")
    cells = {role: cells_of(rec, role) for role, rec in runs.items()}
    arm_cells, pooled = _pool_arms(cells, order)
    labels = _labels(order, arm_cells)
    decided = [judge_cell(_cell_of(k, labels[k], arm_cells), min_gain) for k in order]
    wins = sum(c.verdict == "win" for c in decided)
    blocked = promotion_block(rest)
    verdict: Literal["promote", "retain original"] = (
        "promote" if wins >= need and blocked is None else "retain original"
    )
    dirs = run_dirs or {}
    arms = [
        _arm_summary(role, runs[role], dirs.get(role), pooled[role])
        for role in ("before", "candidate", "restored")
    ]
    card = card_line(decided, min_gain, need, verdict == "promote", blocked)
    changes = candidate_changes(before, candidate)
    return Decision(
        decision=verdict,
        card=card,
        wins=wins,
        inconclusive=sum(c.verdict == "inconclusive" for c in decided),
        cells_total=n,
        min_wins=need,
        min_gain_pct=100 * min_gain,
        rule=rule_words(min_gain, n, need),
        before_run_id=before.run_id,
        candidate_run_id=candidate.run_id,
        restored_run_id=restored.run_id,
        arms=arms,
        cells=decided,
        reasons=[card, *(cell_reason(c, min_gain) for c in decided)],
        caveats=[
            *identity_caveats(before, candidate, rest, changes),
            *caveats(runs, cells, order, decided, labels, min_gain, allow_different_prompts),
        ],
        run_caveats=_run_caveats(runs),
        engine=_engine_facts(arms),
        restoration=rest,
        candidate_changes=changes,
        promotion_blocked=blocked,
    )


def _comparable_cells(
    runs: dict[str, RunRecord], allow_different_prompts: bool, rest: Restoration
) -> list[CellKey]:
    """The cells to compare; raises :class:`NotComparable` naming every problem at once:
    the restoration's mismatches first, then what the matrices lack."""
    refused = refusals(rest)
    try:
        order = check_comparable(runs, allow_different_prompts)
    except NotComparable as e:
        raise NotComparable([*refused, *e.problems]) from None
    if refused:
        raise NotComparable(refused)
    return order


def _run_caveats(runs: dict[str, RunRecord]) -> list[Caveat]:
    """The records' own caveats, one per code (the first run's wording: the arms ran the
    same matrix, so their words differ only in numbers)."""
    seen: dict[str, Caveat] = {}
    for rec in runs.values():
        for c in rec.caveats:
            seen.setdefault(c.code, Caveat(code=c.code, message=c.message))
    return list(seen.values())


def _pool_arms(
    cells: RoleCells, order: list[CellKey]
) -> tuple[dict[str, dict[CellKey, CellArm]], dict[str, list[CellResult]]]:
    """Every arm of every cell pooled over its repetitions: role → key → arm, and role →
    the pooled cells in ``order``."""
    pooled: dict[str, list[CellResult]] = {role: [] for role in ROLES}
    arm_cells: dict[str, dict[CellKey, CellArm]] = {role: {} for role in ROLES}
    for role in ROLES:
        for k in order:
            arm, p = arm_of_cell(cells[role][k])
            arm_cells[role][k] = arm
            pooled[role].append(p)
    return arm_cells, pooled


def _cell_of(
    key: CellKey, label: str, arm_cells: dict[str, dict[CellKey, CellArm]]
) -> CellDecision:
    """One cell's three arms, not yet judged."""
    return CellDecision(
        label=label,
        input_tokens_target=key[0],
        concurrency=key[1],
        before=arm_cells["before"][key],
        candidate=arm_cells["candidate"][key],
        restored=arm_cells["restored"][key],
    )


def _engine_facts(arms: list[ArmSummary]) -> EngineFacts:
    """Token slots of the candidate against each control, and whether any arm decoded
    speculatively."""
    by_arm = {a.role: a for a in arms}
    return EngineFacts(
        token_slots_vs_before=fmt_change(
            by_arm["before"].token_slots, by_arm["candidate"].token_slots
        ),
        token_slots_vs_restored=fmt_change(
            by_arm["restored"].token_slots, by_arm["candidate"].token_slots
        ),
        spec_decode=any(a.spec_decode_acceptance_rate is not None for a in arms),
    )


def _arm_summary(
    role: Role, rec: RunRecord, run_dir: str | None, pooled: list[CellResult]
) -> ArmSummary:
    slots: int | None = None
    partial = False
    if rec.identity is not None and rec.identity.endpoints:
        known = [e.token_slots for e in rec.identity.endpoints if e.token_slots is not None]
        if known:
            slots, partial = sum(known), len(known) < len(rec.identity.endpoints)
    engines = rec.telemetry.engines
    if slots is None and engines:
        known_f = [e.token_slots for e in engines if e.token_slots is not None]
        if known_f:
            slots, partial = int(sum(known_f)), len(known_f) < len(engines)
    rate, length = _spec_decode(engines)
    running = [c.max_running for c in pooled if c.max_running is not None]
    free = [c.min_free_mib for c in pooled if c.min_free_mib is not None]
    label = config_value(rec, "label")
    return ArmSummary(
        role=role,
        run_id=rec.run_id,
        run_dir=run_dir,
        status=rec.status.value,
        model=rec.identity.model if rec.identity else None,
        label=label if isinstance(label, str) and label else None,
        completed=sum(c.completed for c in pooled),
        failed=sum(c.failed for c in pooled),
        token_slots=slots,
        token_slots_partial=partial,
        spec_decode_acceptance_rate=rate,
        spec_decode_mean_acceptance_length=length,
        max_running=max(running) if running else None,
        min_free_mib=min(free) if free else None,
    )


def _spec_decode(engines: list[EngineSummary]) -> tuple[float | None, float | None]:
    """Acceptance over all endpoints: summed counters, else the mean of the gauges."""
    specs = [e.spec_decode for e in engines if e.spec_decode is not None]
    counted = [(s, s.draft_tokens) for s in specs if s.draft_tokens is not None]
    if counted:
        drafts = sum(float(s.drafts or 0) for s, _ in counted)
        tokens = sum(float(n) for _, n in counted)
        accepted = sum(float(s.accepted_tokens or 0) for s, _ in counted)
        return (accepted / tokens if tokens else None, 1 + accepted / drafts if drafts else None)
    gauges = [float(s.acceptance_rate) for s in specs if s.acceptance_rate is not None]
    return (sum(gauges) / len(gauges) if gauges else None, None)


def _labels(
    order: list[CellKey], arm_cells: dict[str, dict[CellKey, CellArm]]
) -> dict[CellKey, str]:
    """``~6K/C4`` from the actual input (before arm, else any arm); ``~8000 target/C4``
    without one, and for every cell when two would read the same."""
    out = {}
    for k in order:
        actual = next(
            (
                arm_cells[r][k].input_tokens_mean
                for r in ROLES
                if arm_cells[r][k].input_tokens_mean is not None
            ),
            None,
        )
        out[k] = f"{_input_label(actual)}/C{k[1]}" if actual is not None else _target_cell_label(k)
    if len(set(out.values())) < len(out):
        out = {k: _target_cell_label(k) for k in order}
    return out


def _target_cell_label(key: CellKey) -> str:
    return f"~{key[0]} target/C{key[1]}"


def _input_label(tokens: float) -> str:
    n = round(tokens)
    return f"~{round(n / 1000)}K" if n >= 1000 else f"~{n}"
