"""The caveats of ``soaktop decide``: what limits what the decision shows.

A caveat explains; the rule (:mod:`soak.after.decide_rule`) decides. Some caveats name
what also made a cell inconclusive (few samples, controls that disagree, output lengths
apart) — the rule made that cell no win, the caveat says so beside the decision; the
others never flip it. Three groups, in this order: what the runs are (identity, matrix
settings, prompts), how they went (status, gates, failed requests, counter gaps) and what
the measurement can carry (samples, output length, control drift, regressions, a stale
stored median). Which servers the arms measured (restoration, the candidate's recipe) is
:mod:`soak.after.decide_identity`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from soak.after.decide_model import (
    MAX_OUTPUT_SPREAD,
    MIN_POOLED_REQUESTS,
    MIN_REPS,
    ROLES,
    TOLERANCE,
    Caveat,
    CellDecision,
    fmt_gain,
    fmt_gain_limit,
)
from soak.after.decide_rule import CellKey, RoleCells, few_samples, pool_differences
from soak.after.record_view import rep_window
from soak.record.matrix import pool_cell
from soak.record.models import RunRecord, Status


def caveats(
    runs: dict[str, RunRecord],
    cells: RoleCells,
    order: list[CellKey],
    decided: list[CellDecision],
    labels: dict[CellKey, str],
    min_gain: float,
    allow_different_prompts: bool,
) -> list[Caveat]:
    """Every caveat the three runs and their decided cells earn, in a fixed order (the
    runs, their health, the measurement)."""
    return [
        *_setting_caveats(runs, cells, order, allow_different_prompts),
        *_health_caveats(runs, cells, order, labels),
        *_sample_caveats(order, decided, labels),
        *_drift_caveats(decided, min_gain),
        *_stale_caveats(cells, order, labels),
    ]


def _setting_caveats(
    runs: dict[str, RunRecord],
    cells: RoleCells,
    order: list[CellKey],
    allow_different_prompts: bool,
) -> list[Caveat]:
    """Identity and settings: do the arms measure the same model, matrix and prompts?"""
    out: list[Caveat] = []
    models = {role: rec.identity.model if rec.identity else None for role, rec in runs.items()}
    no_ident = [role for role, m in models.items() if m is None]
    if no_ident:
        out.append(
            Caveat(
                code="no_identity",
                message=f"no identity in the {', '.join(no_ident)} run(s): the model and "
                "token slots cannot be checked there",
            )
        )
    known = {m for m in models.values() if m is not None}
    if len(known) > 1:
        out.append(
            Caveat(
                code="model_differs",
                message="the model identity differs: "
                + ", ".join(f"{role} {m!r}" for role, m in models.items() if m is not None)
                + " — the arms may not measure the same model",
            )
        )
    settings = _settings_differences(runs)
    if settings:
        out.append(
            Caveat(
                code="matrix_settings_differ",
                message=f"the matrix settings differ: {'; '.join(settings)}",
            )
        )
    if allow_different_prompts and (diff := pool_differences(cells, order)):
        out.append(
            Caveat(
                code="different_prompts",
                message="the arms sent different prompts (--allow-different-prompts): "
                f"{'; '.join(diff)}",
            )
        )
    return out


def _health_caveats(
    runs: dict[str, RunRecord], cells: RoleCells, order: list[CellKey], labels: dict[CellKey, str]
) -> list[Caveat]:
    """Run health: status, contract gates, failed timed requests, counter gaps."""
    out: list[Caveat] = []
    not_passed = [
        f"{role} {rec.status.value}" + (f" ({rec.reasons[0].message})" if rec.reasons else "")
        for role, rec in runs.items()
        if rec.status != Status.PASSED
    ]
    if not_passed:
        out.append(
            Caveat(code="run_not_passed", message=f"not every run PASSED: {'; '.join(not_passed)}")
        )
    gates = [g for role, rec in runs.items() if (g := _gate_failures(role, rec))]
    if gates:
        out.append(
            Caveat(code="gates_failed", message=f"contract gates failed: {'; '.join(gates)}")
        )
    failures = _request_failures(runs, cells, order, labels)
    if failures:
        out.append(
            Caveat(
                code="request_failures",
                message="timed requests failed (the medians cover the completed ones only): "
                f"{'; '.join(failures)}",
            )
        )
    gaps = _reconciliation_gaps(runs, cells, order, labels)
    if gaps:
        out.append(
            Caveat(
                code="reconciliation_gap",
                message="the server's counters did not reconcile with what the client "
                f"received: {'; '.join(gaps)}",
            )
        )
    return out


def _sample_caveats(
    order: list[CellKey], decided: list[CellDecision], labels: dict[CellKey, str]
) -> list[Caveat]:
    """What the samples can carry: enough requests and repetitions, the same work."""
    out: list[Caveat] = []
    few = [
        f"{labels[k]} {role} {arm.requests} requests in {arm.reps} repetitions"
        for k, cell in zip(order, decided, strict=True)
        for role in ROLES
        if few_samples(arm := getattr(cell, role))
    ]
    if few:
        out.append(
            Caveat(
                code="few_samples",
                message=f"few samples (fewer than {MIN_POOLED_REQUESTS} pooled requests or "
                f"{MIN_REPS} repetitions): {'; '.join(few)} — those medians are fragile, "
                "and those cells are inconclusive",
            )
        )
    spread = _output_spread(decided)
    if spread:
        out.append(
            Caveat(
                code="output_length_differs",
                message="natural output length differs across arms by more than "
                f"{fmt_gain_limit(MAX_OUTPUT_SPREAD)}: {'; '.join(spread)} — E2E then "
                "compares different amounts of work",
            )
        )
    return out


def _drift_caveats(decided: list[CellDecision], min_gain: float) -> list[Caveat]:
    """Controls that drifted apart, and a candidate materially slower than both."""
    out: list[Caveat] = []
    limit = fmt_gain_limit(min_gain)
    shaky = [
        f"{c.label} controls {c.controls_apart_pct:.2f}% apart"
        for c in decided
        if not c.reliable and c.controls_apart_pct is not None
    ]
    if shaky:
        out.append(
            Caveat(
                code="controls_disagree",
                message=f"the before and restored controls disagree by more than {limit}: "
                f"{'; '.join(shaky)} — the machine drifted by more than the gain asked for, "
                "so those cells are inconclusive (repeat the scout)",
            )
        )
    worse = [
        f"{c.label} {fmt_gain(c.gain_vs_before_pct)} than before, "
        f"{fmt_gain(c.gain_vs_restored_pct)} than restored"
        for c in decided
        if _materially_slower(c, min_gain)
    ]
    if worse:
        out.append(
            Caveat(
                code="material_regression",
                message=f"the candidate is at least {limit} slower than both controls in: "
                f"{'; '.join(worse)}",
            )
        )
    return out


def _materially_slower(c: CellDecision, min_gain: float) -> bool:
    """The candidate's median is at least ``min_gain`` above each control's."""
    b, cand, r = c.before.e2e_median_s, c.candidate.e2e_median_s, c.restored.e2e_median_s
    return (
        c.gain_vs_before_pct is not None
        and c.gain_vs_restored_pct is not None
        and cand is not None
        and b is not None
        and r is not None
        and cand >= b * (1 + min_gain)
        and cand >= r * (1 + min_gain)
    )


def _stale_caveats(
    cells: RoleCells, order: list[CellKey], labels: dict[CellKey, str]
) -> list[Caveat]:
    """A record whose stored median is not the one its repetitions give."""
    stale = _stored_median_differs(cells, order, labels)
    if not stale:
        return []
    return [
        Caveat(
            code="stored_median_differs",
            message="the record's stored median differs from the one recomputed from its "
            f"repetitions (the recomputed one is used): {'; '.join(stale)}",
        )
    ]


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
        for suite, res in suites.items():
            if res.failures or res.passed < res.total:
                bad.append(f"{phase} {suite} {res.passed}/{res.total}")
    return f"{role} {', '.join(bad)}" if bad else ""


def _request_failures(
    runs: dict[str, RunRecord],
    cells: RoleCells,
    order: list[CellKey],
    labels: dict[CellKey, str],
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
    cells: RoleCells,
    order: list[CellKey],
    labels: dict[CellKey, str],
) -> list[str]:
    out = []
    for role, rec in runs.items():
        reps = [
            f"{labels[k]} rep {r.rep}"
            for k in order
            for r in cells[role][k].reps
            if rep_window(r).matched is False
        ]
        if reps:
            out.append(f"{role} {', '.join(reps)}")
        elif rec.reconciliation.matched is False:
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
    cells: RoleCells,
    order: list[CellKey],
    labels: dict[CellKey, str],
) -> list[str]:
    out = []
    for role in ROLES:
        for k in order:
            cell = cells[role][k]
            stored, fresh = cell.e2e_median_s, pool_cell(cell).e2e_median_s
            if stored is not None and fresh is not None and not math.isclose(stored, fresh):
                out.append(f"{labels[k]} {role} stored {stored:.3f} s, recomputed {fresh:.3f} s")
    return out
