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
* **Control agreement.** The two controls measure the same configuration; when the faster
  one is *more than* ``min_gain`` below the slower one (``(max − min) / max > min_gain``)
  the machine drifted by more than the effect asked for. The cell's verdict still follows
  the rule (beating both controls means beating the faster one by ``min_gain``), and the
  drift is a ``controls_disagree`` caveat beside it (the issue's rule; a stricter reading
  would discard such cells, which would make one noisy control veto a real gain).
* **Decision.** ``promote`` when at least ``min_wins`` cells are material wins,
  else ``retain original``. Seed 004 only shows the retain side (0/4 in each trial; "Neither
  demonstrated a 10% end-to-end latency improvement against both … controls"; "A future
  experiment would need a specific workload benefit"), which reads as "one workload group
  with a material win would have been a demonstrated improvement": the default
  ``min_wins`` is 1; ``min_wins=None`` requires every cell.

Comparability is checked first: the three runs must each have a matrix, the same cells and
(unless allowed) the same prompt pool per cell, and be three different runs; anything else
raises :class:`NotComparable`. A different model name, different matrix settings, failed
gates, failed requests, counter gaps, too few samples, output lengths that differ across
arms, a run that did not pass and a regression are caveats beside the decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from soak.record.matrix import CellResult, pool_cell
from soak.record.models import RunRecord, Status

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


def _input_label(tokens: float) -> str:
    n = round(tokens)
    return f"~{round(n / 1000)}K" if n >= 1000 else f"~{n}"


# ---------------------------------------------------------------- the rule


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


# ---------------------------------------------------------------- the decision


def _key(c: CellResult) -> tuple[int, int]:
    return (c.input_tokens_target, c.concurrency)


def _target_label(key: tuple[int, int]) -> str:
    return f"~{key[0]} / C{key[1]}"


def _cells_of(rec: RunRecord, role: str) -> dict[tuple[int, int], CellResult]:
    assert rec.matrix is not None
    out: dict[tuple[int, int], CellResult] = {}
    for c in rec.matrix.cells:
        if _key(c) in out:
            raise NotComparable([f"{role} run {rec.run_id} lists cell {c.label} twice"])
        out[_key(c)] = c
    return out


def check_comparable(
    runs: dict[str, RunRecord], allow_different_prompts: bool = False
) -> list[tuple[int, int]]:
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
    cells = {role: _cells_of(rec, role) for role, rec in runs.items()}
    problems: list[str] = []
    for role in ROLES[1:]:
        for a, b in (("before", role), (role, "before")):
            extra = [k for k in cells[a] if k not in cells[b]]
            if extra:
                other = runs[b].matrix
                not_run = other.not_run if other is not None else []
                names = ", ".join(
                    _target_label(k) + (" (not run there)" if _target_label(k) in not_run else "")
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
    if not allow_different_prompts and (diff := _pool_differences(cells, order)):
        raise NotComparable(
            [
                f"the prompt pools differ ({'; '.join(diff)}): the arms must send the same "
                "prompts (same --pool-seed and pool); --allow-different-prompts compares "
                "anyway and records it as a caveat"
            ]
        )
    return order


def _pool_differences(
    cells: dict[str, dict[tuple[int, int], CellResult]], order: list[tuple[int, int]]
) -> list[str]:
    out = []
    for k in order:
        hashes = {role: cells[role][k].prompt_pool_sha256 for role in ROLES}
        if len(set(hashes.values())) > 1:
            shown = ", ".join(f"{role} {h[:12]}" for role, h in hashes.items())
            out.append(f"{_target_label(k)}: {shown}")
    return out


def _arm_cell(cell: CellResult) -> tuple[CellArm, CellResult]:
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


def _judge(cell: CellDecision, min_gain: float) -> CellDecision:
    b, c, r = (cell.before.e2e_median_s, cell.candidate.e2e_median_s, cell.restored.e2e_median_s)
    if b is None or c is None or r is None or b <= 0 or r <= 0:
        return cell.model_copy(update={"verdict": "no data", "win": False})
    win = is_material_win(b, c, min_gain) and is_material_win(r, c, min_gain)
    reliable = not controls_disagree(b, r, min_gain)
    return cell.model_copy(
        update={
            "gain_vs_before_pct": gain_pct(b, c),
            "gain_vs_restored_pct": gain_pct(r, c),
            "controls_apart_pct": 100 * (max(b, r) - min(b, r)) / max(b, r),
            "win": win,
            "reliable": reliable,
            "verdict": "win" if win else "no win",
        }
    )


def _cell_reason(cell: CellDecision, min_gain: float) -> str:
    limit = fmt_gain_limit(min_gain)
    if cell.verdict == "no data":
        lacking = [role for role in ROLES if getattr(cell, role).e2e_median_s is None]
        return (
            f"{cell.label}: no completed timed request in "
            f"{', '.join(lacking) or 'a control'}: no verdict, not a win"
        )
    gb, gr = cell.gain_vs_before_pct, cell.gain_vs_restored_pct
    assert gb is not None and gr is not None
    b, c, r = cell.before.e2e_median_s, cell.candidate.e2e_median_s, cell.restored.e2e_median_s
    assert b is not None and c is not None and r is not None
    vs = {"before": gb, "restored": gr}
    met = {"before": is_material_win(b, c, min_gain), "restored": is_material_win(r, c, min_gain)}
    if cell.win:
        text = (
            f"{cell.label}: {fmt_gain(gb)} than before and {fmt_gain(gr)} than restored: "
            f"at least {limit} faster than both"
        )
    elif any(met.values()):
        good, bad = ("before", "restored") if met["before"] else ("restored", "before")
        joiner = " but only " if vs[bad] > 0 else " but "
        text = (
            f"{cell.label}: {fmt_gain(vs[good])} than {good}{joiner}{fmt_gain(vs[bad])} "
            f"than {bad}: not at least {limit} faster than both"
        )
    else:
        text = (
            f"{cell.label}: {fmt_gain(gb)} than before, {fmt_gain(gr)} than restored: "
            f"not at least {limit} faster than both"
        )
    if not cell.reliable:
        text += (
            f"; the controls are {cell.controls_apart_pct:.2f}% apart (more than {limit}): "
            "the machine drifted by more than the gain asked for"
        )
    return text


def _arm_summary(
    role: Role, rec: RunRecord, run_dir: str | None, pooled: list[CellResult]
) -> ArmSummary:
    slots: int | None = None
    partial = False
    if rec.identity is not None and rec.identity.endpoints:
        known = [e.token_slots for e in rec.identity.endpoints if e.token_slots is not None]
        if known:
            slots, partial = sum(known), len(known) < len(rec.identity.endpoints)
    engines = [e for e in rec.telemetry.get("engines") or [] if isinstance(e, dict)]
    if slots is None and engines:
        known_f = [e["token_slots"] for e in engines if e.get("token_slots") is not None]
        if known_f:
            slots, partial = int(sum(known_f)), len(known_f) < len(engines)
    rate, length = _spec_decode(engines)
    running = [c.max_running for c in pooled if c.max_running is not None]
    free = [c.min_free_mib for c in pooled if c.min_free_mib is not None]
    label = rec.config.get("label")
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


def _spec_decode(engines: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Acceptance over all endpoints: summed counters, else the mean of the gauges."""
    specs = [e["spec_decode"] for e in engines if isinstance(e.get("spec_decode"), dict)]
    counted = [s for s in specs if s.get("draft_tokens") is not None]
    if counted:
        drafts = sum(float(s.get("drafts") or 0) for s in counted)
        tokens = sum(float(s["draft_tokens"]) for s in counted)
        accepted = sum(float(s.get("accepted_tokens") or 0) for s in counted)
        return (accepted / tokens if tokens else None, 1 + accepted / drafts if drafts else None)
    gauges = [float(s["acceptance_rate"]) for s in specs if s.get("acceptance_rate") is not None]
    return (sum(gauges) / len(gauges) if gauges else None, None)


def decide(
    before: RunRecord,
    candidate: RunRecord,
    restored: RunRecord,
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    min_wins: int | None = DEFAULT_MIN_WINS,
    allow_different_prompts: bool = False,
    run_dirs: dict[str, str] | None = None,
) -> Decision:
    """The decision over three matrix runs (``min_wins=None``: every cell must win).

    Raises :class:`NotComparable` for runs that cannot be compared and ``ValueError`` for
    a ``min_gain`` outside (0, 1) or a ``min_wins`` outside 1..cells."""
    if not 0 < min_gain < 1:
        raise ValueError(f"min_gain {min_gain!r} must be between 0 and 1 (exclusive)")
    runs: dict[str, RunRecord] = {"before": before, "candidate": candidate, "restored": restored}
    order = check_comparable(runs, allow_different_prompts)
    n = len(order)
    need = n if min_wins is None else min_wins
    if not 1 <= need <= n:
        raise ValueError(f"min_wins {need} must be between 1 and the {n} cells")
    cells = {role: _cells_of(rec, role) for role, rec in runs.items()}
    pooled: dict[str, list[CellResult]] = {role: [] for role in ROLES}
    arm_cells: dict[str, dict[tuple[int, int], CellArm]] = {role: {} for role in ROLES}
    for role in ROLES:
        for k in order:
            arm, p = _arm_cell(cells[role][k])
            arm_cells[role][k] = arm
            pooled[role].append(p)

    labels = _labels(order, arm_cells)
    decided = [
        _judge(
            CellDecision(
                label=labels[k],
                input_tokens_target=k[0],
                concurrency=k[1],
                before=arm_cells["before"][k],
                candidate=arm_cells["candidate"][k],
                restored=arm_cells["restored"][k],
            ),
            min_gain,
        )
        for k in order
    ]
    wins = sum(c.verdict == "win" for c in decided)
    verdict: Literal["promote", "retain original"] = (
        "promote" if wins >= need else "retain original"
    )
    dirs = run_dirs or {}
    arms = [
        _arm_summary(role, runs[role], dirs.get(role), pooled[role])
        for role in ("before", "candidate", "restored")
    ]
    limit = fmt_gain_limit(min_gain)
    if n == 1:
        need_text, verb = "the one cell", "is"
    elif need == n:
        need_text, verb = "every cell", "is"
    else:
        need_text, verb = f"at least {need} of the {n} cells", "are" if need > 1 else "is"
    rule = (
        f"A cell is a material win when the candidate's pooled median E2E is at least {limit} "
        f"lower than both the before and the restored control (candidate ≤ control × "
        f"{1 - min_gain:g}, boundary included); controls more than {limit} apart are a "
        f"caveat on that cell. Promote when {need_text} {verb} a material win."
    )
    head = f"{wins}/{n} cells are material wins ({need_text} needed): " + (
        "promote the candidate" if verdict == "promote" else "retain the original"
    )
    by_arm = {a.role: a for a in arms}
    return Decision(
        decision=verdict,
        wins=wins,
        cells_total=n,
        min_wins=need,
        min_gain_pct=100 * min_gain,
        rule=rule,
        before_run_id=before.run_id,
        candidate_run_id=candidate.run_id,
        restored_run_id=restored.run_id,
        arms=arms,
        cells=decided,
        reasons=[head, *(_cell_reason(c, min_gain) for c in decided)],
        caveats=_caveats(runs, cells, order, decided, labels, min_gain, allow_different_prompts),
        engine=EngineFacts(
            token_slots_vs_before=fmt_change(
                by_arm["before"].token_slots, by_arm["candidate"].token_slots
            ),
            token_slots_vs_restored=fmt_change(
                by_arm["restored"].token_slots, by_arm["candidate"].token_slots
            ),
            spec_decode=any(a.spec_decode_acceptance_rate is not None for a in arms),
        ),
    )


def _labels(
    order: list[tuple[int, int]], arm_cells: dict[str, dict[tuple[int, int], CellArm]]
) -> dict[tuple[int, int], str]:
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


def _target_cell_label(key: tuple[int, int]) -> str:
    return f"~{key[0]} target/C{key[1]}"


# ---------------------------------------------------------------- caveats


def _caveats(
    runs: dict[str, RunRecord],
    cells: dict[str, dict[tuple[int, int], CellResult]],
    order: list[tuple[int, int]],
    decided: list[CellDecision],
    labels: dict[tuple[int, int], str],
    min_gain: float,
    allow_different_prompts: bool,
) -> list[Caveat]:
    out: list[Caveat] = []
    limit = fmt_gain_limit(min_gain)

    def add(code: str, message: str) -> None:
        out.append(Caveat(code=code, message=message))

    # identity and settings
    models = {role: rec.identity.model if rec.identity else None for role, rec in runs.items()}
    no_ident = [role for role, m in models.items() if m is None]
    if no_ident:
        add(
            "no_identity",
            f"no identity in the {', '.join(no_ident)} run(s): the model and token slots "
            "cannot be checked there",
        )
    known = {m for m in models.values() if m is not None}
    if len(known) > 1:
        add(
            "model_differs",
            "the model identity differs: "
            + ", ".join(f"{role} {m!r}" for role, m in models.items() if m is not None)
            + " — the arms may not measure the same model",
        )
    settings = _settings_differences(runs)
    if settings:
        add("matrix_settings_differ", f"the matrix settings differ: {'; '.join(settings)}")
    if allow_different_prompts and (diff := _pool_differences(cells, order)):
        add(
            "different_prompts",
            f"the arms sent different prompts (--allow-different-prompts): {'; '.join(diff)}",
        )

    # run health
    not_passed = [
        f"{role} {rec.status.value}" + (f" ({rec.reasons[0].message})" if rec.reasons else "")
        for role, rec in runs.items()
        if rec.status != Status.PASSED
    ]
    if not_passed:
        add("run_not_passed", f"not every run PASSED: {'; '.join(not_passed)}")
    gates = [g for role, rec in runs.items() if (g := _gate_failures(role, rec))]
    if gates:
        add("gates_failed", f"contract gates failed: {'; '.join(gates)}")
    failures = _request_failures(runs, cells, order, labels)
    if failures:
        add(
            "request_failures",
            f"timed requests failed (the medians cover the completed ones only): "
            f"{'; '.join(failures)}",
        )
    gaps = _reconciliation_gaps(runs, cells, order, labels)
    if gaps:
        add(
            "reconciliation_gap",
            f"the server's counters did not reconcile with what the client received: "
            f"{'; '.join(gaps)}",
        )

    # the measurement itself
    few = [
        f"{labels[k]} {role} {arm.requests} requests in {arm.reps} repetitions"
        for k, cell in zip(order, decided, strict=True)
        for role in ROLES
        if (arm := getattr(cell, role)).requests < MIN_POOLED_REQUESTS or arm.reps < MIN_REPS
    ]
    if few:
        add(
            "few_samples",
            f"few samples (fewer than {MIN_POOLED_REQUESTS} pooled requests or "
            f"{MIN_REPS} repetitions): {'; '.join(few)} — those medians are fragile",
        )
    spread = _output_spread(decided)
    if spread:
        add(
            "output_length_differs",
            f"natural output length differs across arms by more than "
            f"{fmt_gain_limit(MAX_OUTPUT_SPREAD)}: {'; '.join(spread)} — E2E then compares "
            "different amounts of work",
        )
    shaky = [
        f"{c.label} controls {c.controls_apart_pct:.2f}% apart"
        for c in decided
        if not c.reliable and c.controls_apart_pct is not None
    ]
    if shaky:
        add(
            "controls_disagree",
            f"the before and restored controls disagree by more than {limit}: "
            f"{'; '.join(shaky)} — the machine drifted by more than the gain asked for; "
            "read those cells with care (repeat the scout)",
        )
    worse = [
        f"{c.label} {fmt_gain(c.gain_vs_before_pct)} than before, "
        f"{fmt_gain(c.gain_vs_restored_pct)} than restored"
        for c in decided
        if c.gain_vs_before_pct is not None
        and c.gain_vs_restored_pct is not None
        and c.candidate.e2e_median_s is not None
        and c.before.e2e_median_s is not None
        and c.restored.e2e_median_s is not None
        and c.candidate.e2e_median_s >= c.before.e2e_median_s * (1 + min_gain)
        and c.candidate.e2e_median_s >= c.restored.e2e_median_s * (1 + min_gain)
    ]
    if worse:
        add(
            "material_regression",
            f"the candidate is at least {limit} slower than both controls in: {'; '.join(worse)}",
        )
    stale = _stored_median_differs(cells, order, labels)
    if stale:
        add(
            "stored_median_differs",
            "the record's stored median differs from the one recomputed from its "
            f"repetitions (the recomputed one is used): {'; '.join(stale)}",
        )
    return out


def _settings_differences(runs: dict[str, RunRecord]) -> list[str]:
    fields: dict[str, Callable[[RunRecord], object]] = {
        "max_tokens": lambda r: r.matrix.max_tokens if r.matrix else None,
        "reasoning": lambda r: r.matrix.reasoning if r.matrix else None,
        "reps": lambda r: r.matrix.spec.reps if r.matrix else None,
        "requests per rep": lambda r: r.matrix.spec.requests if r.matrix else None,
        "warmup": lambda r: r.matrix.spec.warmup if r.matrix else None,
    }
    out = []
    for name, get in fields.items():
        vals = {role: get(rec) for role, rec in runs.items()}
        if len({repr(v) for v in vals.values()}) > 1:
            out.append(f"{name}: " + ", ".join(f"{role} {v}" for role, v in vals.items()))
    return out


def _gate_failures(role: str, rec: RunRecord) -> str:
    bad = []
    for phase, suites in rec.gates.items():
        if not isinstance(suites, dict):
            continue
        for suite, res in suites.items():
            if not isinstance(res, dict):
                continue
            passed, total = res.get("passed", 0), res.get("total", 0)
            if res.get("failures") or passed < total:
                bad.append(f"{phase} {suite} {passed}/{total}")
    return f"{role} {', '.join(bad)}" if bad else ""


def _request_failures(
    runs: dict[str, RunRecord],
    cells: dict[str, dict[tuple[int, int], CellResult]],
    order: list[tuple[int, int]],
    labels: dict[tuple[int, int], str],
) -> list[str]:
    out = []
    for role in runs:
        parts = []
        for k in order:
            reps = cells[role][k].reps
            failed = sum(r.failed for r in reps)
            if failed:
                classes: dict[str, int] = {}
                for r in reps:
                    for cls, n in r.failures_by_class.items():
                        classes[cls] = classes.get(cls, 0) + n
                why = ", ".join(f"{n} {cls}" for cls, n in sorted(classes.items()))
                total = failed + sum(r.completed for r in reps)
                parts.append(f"{labels[k]} {failed}/{total}" + (f" ({why})" if why else ""))
        if parts:
            out.append(f"{role} {', '.join(parts)}")
    return out


def _reconciliation_gaps(
    runs: dict[str, RunRecord],
    cells: dict[str, dict[tuple[int, int], CellResult]],
    order: list[tuple[int, int]],
    labels: dict[tuple[int, int], str],
) -> list[str]:
    out = []
    for role, rec in runs.items():
        reps = [
            f"{labels[k]} rep {r.rep}"
            for k in order
            for r in cells[role][k].reps
            if r.reconciliation.get("matched") is False
        ]
        if reps:
            out.append(f"{role} {', '.join(reps)}")
        elif rec.reconciliation.get("matched") is False:
            out.append(f"{role} (the run's windows)")
    return out


def _output_spread(decided: list[CellDecision]) -> list[str]:
    out = []
    for c in decided:
        means = [getattr(c, role).output_tokens_mean for role in ROLES]
        if any(m is None for m in means):
            continue
        vals = [float(m) for m in means if m is not None]
        lo, hi = min(vals), max(vals)
        if lo > 0 and hi > lo * (1 + MAX_OUTPUT_SPREAD) + TOLERANCE * lo:
            shown = " / ".join(f"{v:,.0f}" for v in vals)
            out.append(
                f"{c.label} mean output tokens {shown} (before / candidate / restored), "
                f"{100 * (hi - lo) / lo:.1f}% apart"
            )
    return out


def _stored_median_differs(
    cells: dict[str, dict[tuple[int, int], CellResult]],
    order: list[tuple[int, int]],
    labels: dict[tuple[int, int], str],
) -> list[str]:
    out = []
    for role in ROLES:
        for k in order:
            cell = cells[role][k]
            stored, fresh = cell.e2e_median_s, pool_cell(cell).e2e_median_s
            if stored is not None and fresh is not None and not math.isclose(stored, fresh):
                out.append(f"{labels[k]} {role} stored {stored:.3f} s, recomputed {fresh:.3f} s")
    return out


# ---------------------------------------------------------------- rendering
