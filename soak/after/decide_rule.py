"""The rule of ``soaktop decide`` and the statistics it is applied to.

Which runs can be compared at all (:func:`check_comparable`), how a cell's repetitions are
pooled into one arm (:func:`arm_of_cell`), the inclusive boundary of a material win and of
control agreement (:func:`is_material_win`, :func:`controls_disagree`), and what makes a
cell inconclusive (:func:`inconclusive_reasons`), as :mod:`soak.after.decide`'s docstring
states them.
"""

from __future__ import annotations

from soak.after.decide_model import (
    MAX_OUTPUT_SPREAD,
    MIN_POOLED_REQUESTS,
    MIN_REPS,
    ROLES,
    TOLERANCE,
    CellArm,
    CellDecision,
    NotComparable,
)
from soak.record.matrix import CellResult, pool_cell
from soak.record.models import RunRecord

CellKey = tuple[int, int]
"""(input tokens target, concurrency): how a cell is matched across the three runs."""
RoleCells = dict[str, dict[CellKey, CellResult]]
"""role → cell key → that run's cell."""


def gain_pct(control: float, candidate: float) -> float:
    """100 × (control − candidate) / control: positive = the candidate is faster."""
    return 100 * (control - candidate) / control


def is_material_win(control: float, candidate: float, min_gain: float) -> bool:
    """``candidate <= control × (1 − min_gain)``, boundary included (1e-9 relative)."""
    return candidate <= control * (1 - min_gain) + TOLERANCE * control


def controls_disagree(before: float, restored: float, min_gain: float) -> bool:
    """The faster control is *more than* ``min_gain`` below the slower one."""
    hi, lo = max(before, restored), min(before, restored)
    return lo < hi * (1 - min_gain) - TOLERANCE * hi


def outputs_differ(a: float, b: float) -> bool:
    """Two mean output lengths more than ``MAX_OUTPUT_SPREAD`` apart ((max − min) / min)."""
    hi, lo = max(a, b), min(a, b)
    return hi > lo * (1 + MAX_OUTPUT_SPREAD) + TOLERANCE * lo


def few_samples(arm: CellArm) -> bool:
    """Fewer than ``MIN_POOLED_REQUESTS`` pooled requests or ``MIN_REPS`` repetitions."""
    return arm.requests < MIN_POOLED_REQUESTS or arm.reps < MIN_REPS


def candidate_output_differs(cell: CellDecision) -> bool:
    """The candidate's mean output tokens differ materially from *both* controls' (one
    control within the spread is the same work as that control); unknown lengths never
    differ."""
    c = cell.candidate.output_tokens_mean
    b, r = cell.before.output_tokens_mean, cell.restored.output_tokens_mean
    if c is None or b is None or r is None:
        return False
    return outputs_differ(c, b) and outputs_differ(c, r)


def inconclusive_reasons(cell: CellDecision, reliable: bool) -> list[str]:
    """Why a cell with data in every arm cannot decide (empty: it can), in the order of
    :attr:`CellDecision.inconclusive_reasons`."""
    out = []
    if not reliable:
        out.append("controls_disagree")
    if candidate_output_differs(cell):
        out.append("output_length_differs")
    if any(few_samples(getattr(cell, role)) for role in ROLES):
        out.append("few_samples")
    return out


def _key(c: CellResult) -> CellKey:
    return (c.input_tokens_target, c.concurrency)


def target_label(key: CellKey) -> str:
    """``~8000 / C4``: a cell by its target input and concurrency (the runs' own words)."""
    return f"~{key[0]} / C{key[1]}"


def cells_of(rec: RunRecord, role: str) -> dict[CellKey, CellResult]:
    """A matrix run's cells by key (raises :class:`NotComparable` for a cell listed twice)."""
    assert rec.matrix is not None
    out: dict[CellKey, CellResult] = {}
    for c in rec.matrix.cells:
        if _key(c) in out:
            raise NotComparable([f"{role} run {rec.run_id} lists cell {c.label} twice"])
        out[_key(c)] = c
    return out


def check_comparable(
    runs: dict[str, RunRecord], allow_different_prompts: bool = False
) -> list[CellKey]:
    """The cells to compare, in the before run's order; raises :class:`NotComparable`."""
    missing = [
        f"the {role} run {rec.run_id} has no matrix section (a soak, not a matrix scout): "
        "decide compares runs made with --matrix"
        for role, rec in runs.items()
        if rec.matrix is None
    ]
    if missing:
        raise NotComparable(missing)
    ids = {role: rec.run_id for role, rec in runs.items()}
    same = [
        f"the {a} and {b} runs are the same run ({ids[a]}): the rule needs separate runs"
        for i, a in enumerate(ROLES)
        for b in ROLES[i + 1 :]
        if ids[a] == ids[b]
    ]
    if same:
        raise NotComparable(same)
    cells = {role: cells_of(rec, role) for role, rec in runs.items()}
    problems: list[str] = []
    for role in ROLES[1:]:
        for a, b in (("before", role), (role, "before")):
            extra = [k for k in cells[a] if k not in cells[b]]
            if extra:
                other = runs[b].matrix
                not_run = other.not_run if other is not None else []
                names = ", ".join(
                    target_label(k) + (" (not run there)" if target_label(k) in not_run else "")
                    for k in extra
                )
                problems.append(
                    f"the runs do not have the same cells: {a} has {names} that {b} lacks"
                )
    if problems:
        problems = list(dict.fromkeys(problems))
        raise NotComparable(problems)
    order = list(cells["before"])
    if not order:
        raise NotComparable(["the runs' matrices have no cells"])
    if not allow_different_prompts and (diff := pool_differences(cells, order)):
        raise NotComparable(
            [
                f"the prompt pools differ ({'; '.join(diff)}): the arms must send the same "
                "prompts (same --pool-seed and pool); --allow-different-prompts compares "
                "anyway and records it as a caveat"
            ]
        )
    return order


def pool_differences(cells: RoleCells, order: list[CellKey]) -> list[str]:
    """``~8000 / C4: before 0123456789ab, …`` for each cell whose arms sent different
    prompt pools (by their SHA-256)."""
    out = []
    for k in order:
        hashes = {role: cells[role][k].prompt_pool_sha256 for role in ROLES}
        if len(set(hashes.values())) > 1:
            shown = ", ".join(f"{role} {h[:12]}" for role, h in hashes.items())
            out.append(f"{target_label(k)}: {shown}")
    return out


def arm_of_cell(cell: CellResult) -> tuple[CellArm, CellResult]:
    """One arm of one cell, every repetition pooled: the arm as decided on, and the
    pooled cell it came from (its occupancy and memory figures feed the arm summary)."""
    pooled = pool_cell(cell)
    return (
        CellArm(
            e2e_median_s=pooled.e2e_median_s,
            e2e_p50_nearest_s=pooled.e2e_p50_nearest_s,
            requests=sum(len(r.e2e_s) for r in cell.reps),
            reps=len(cell.reps),
            failed=pooled.failed,
            input_tokens_mean=pooled.input_tokens_mean,
            output_tokens_mean=pooled.output_tokens_mean,
        ),
        pooled,
    )


def judge_cell(cell: CellDecision, min_gain: float) -> CellDecision:
    """The cell with its gains, control spread and verdict filled in by the rule: no data,
    else inconclusive when :func:`inconclusive_reasons` names anything (whatever the
    gains), else win or no win."""
    b, c, r = (cell.before.e2e_median_s, cell.candidate.e2e_median_s, cell.restored.e2e_median_s)
    if b is None or c is None or r is None or b <= 0 or r <= 0:
        return cell.model_copy(update={"verdict": "no data", "win": False})
    beats = is_material_win(b, c, min_gain) and is_material_win(r, c, min_gain)
    reliable = not controls_disagree(b, r, min_gain)
    why = inconclusive_reasons(cell, reliable)
    verdict = "inconclusive" if why else "win" if beats else "no win"
    return cell.model_copy(
        update={
            "gain_vs_before_pct": gain_pct(b, c),
            "gain_vs_restored_pct": gain_pct(r, c),
            "controls_apart_pct": 100 * (max(b, r) - min(b, r)) / max(b, r),
            "beats_both": beats,
            "win": verdict == "win",
            "reliable": reliable,
            "verdict": verdict,
            "inconclusive_reasons": why,
        }
    )
