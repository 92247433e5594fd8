"""The sentences of a ``soaktop decide`` result: the rule, the result card's line and one
reason per cell.

Written once here and carried in the :class:`~soak.after.decide_model.Decision` (``rule``,
``card``, ``reasons``), so the text, markdown, HTML and ``--json`` say the same thing.
"""

from __future__ import annotations

from soak.after.decide_model import (
    MAX_OUTPUT_SPREAD,
    MIN_POOLED_REQUESTS,
    MIN_REPS,
    ROLES,
    CellDecision,
    fmt_gain,
    fmt_gain_limit,
)
from soak.after.decide_rule import few_samples, is_material_win


def need_words(n: int, need: int) -> tuple[str, str]:
    """How many cells must win, in words, and the verb that goes with it."""
    if n == 1:
        return "the one cell", "is"
    if need == n:
        return "every cell", "is"
    return f"at least {need} of the {n} cells", "are" if need > 1 else "is"


def rule_words(min_gain: float, n: int, need: int) -> str:
    """The rule as the report states it, with this decision's gain and win count."""
    limit = fmt_gain_limit(min_gain)
    need_text, verb = need_words(n, need)
    return (
        f"A cell is a material win when the candidate's pooled median E2E is at least {limit} "
        f"lower than both the before and the restored control (candidate ≤ control × "
        f"{1 - min_gain:g}, boundary included). A cell is inconclusive — never a win, "
        f"whatever its gains — when its controls are more than {limit} apart, when the "
        "candidate's mean output tokens are more than "
        f"{fmt_gain_limit(MAX_OUTPUT_SPREAD)} from both controls', or when an arm has fewer "
        f"than {MIN_POOLED_REQUESTS} pooled requests or {MIN_REPS} repetitions. "
        f"Promote when {need_text} {verb} a material win. The restored run must be the "
        "original (same model, endpoints, stated and declared recipe, GPU set): otherwise "
        "decide refuses, or with --allow-restoration-drift retains the original."
    )


def card_line(
    cells: list[CellDecision],
    min_gain: float,
    need: int,
    promote: bool,
    blocked: str | None,
) -> str:
    """Seed 004's result card in one line: ``0/4 material wins (1 inconclusive) — at least
    10% lower pooled median E2E required against both controls: retain the original``."""
    n = len(cells)
    wins = sum(c.verdict == "win" for c in cells)
    counts = [
        f"{k} {what}"
        for what, k in (
            ("inconclusive", sum(c.verdict == "inconclusive" for c in cells)),
            ("without data", sum(c.verdict == "no data" for c in cells)),
        )
        if k
    ]
    head = f"{wins}/{n} material wins" + (f" ({', '.join(counts)})" if counts else "")
    need_text = "" if need == 1 else f", in {need_words(n, need)[0]}"
    required = (
        f"at least {fmt_gain_limit(min_gain)} lower pooled median E2E required against "
        f"both controls{need_text}"
    )
    if blocked is not None:
        return f"{head} — {required}; {blocked}: retain the original"
    return f"{head} — {required}: " + (
        "promote the candidate" if promote else "retain the original"
    )


def cell_reason(cell: CellDecision, min_gain: float) -> str:
    """One cell's verdict and why: its gains against each control, or what makes it
    inconclusive (and the gains it does not count), or the arm that had no data."""
    if cell.verdict == "no data":
        lacking = [role for role in ROLES if getattr(cell, role).e2e_median_s is None]
        return (
            f"{cell.label}: no completed timed request in "
            f"{', '.join(lacking) or 'a control'}: no verdict, not a win"
        )
    gains = _gain_words(cell, min_gain)
    if cell.verdict == "inconclusive":
        why = "; ".join(
            _inconclusive_words(cell, code, min_gain) for code in cell.inconclusive_reasons
        )
        return f"{cell.label}: inconclusive: {why} — measured {gains}, which does not count"
    return f"{cell.label}: {gains} — " + ("a material win" if cell.win else "no win")


def _gain_words(cell: CellDecision, min_gain: float) -> str:
    """``14.55% faster than restored but only 1.96% faster than before: not at least 10%
    faster than both``."""
    limit = fmt_gain_limit(min_gain)
    gb, gr = cell.gain_vs_before_pct, cell.gain_vs_restored_pct
    b, c, r = cell.before.e2e_median_s, cell.candidate.e2e_median_s, cell.restored.e2e_median_s
    assert gb is not None and gr is not None and b is not None and c is not None
    assert r is not None
    if cell.beats_both:
        return (
            f"{fmt_gain(gb)} than before and {fmt_gain(gr)} than restored: "
            f"at least {limit} faster than both"
        )
    vs = {"before": gb, "restored": gr}
    met = {"before": is_material_win(b, c, min_gain), "restored": is_material_win(r, c, min_gain)}
    if any(met.values()):
        good, bad = ("before", "restored") if met["before"] else ("restored", "before")
        joiner = " but only " if vs[bad] > 0 else " but "
        return (
            f"{fmt_gain(vs[good])} than {good}{joiner}{fmt_gain(vs[bad])} than {bad}: "
            f"not at least {limit} faster than both"
        )
    return (
        f"{fmt_gain(gb)} than before, {fmt_gain(gr)} than restored: "
        f"not at least {limit} faster than both"
    )


def _inconclusive_words(cell: CellDecision, code: str, min_gain: float) -> str:
    """One reason an inconclusive cell cannot decide, with its numbers."""
    if code == "controls_disagree":
        return (
            f"the controls are {cell.controls_apart_pct:.2f}% apart (more than "
            f"{fmt_gain_limit(min_gain)}): the machine drifted by more than the gain asked for"
        )
    if code == "output_length_differs":
        c, b, r = (
            getattr(cell, role).output_tokens_mean for role in ("candidate", "before", "restored")
        )
        return (
            f"candidate output {c:,.0f} tokens vs {b:,.0f} (before) and {r:,.0f} (restored), "
            f"more than {fmt_gain_limit(MAX_OUTPUT_SPREAD)} from each: E2E compares "
            "different amounts of work"
        )
    short = ", ".join(
        f"{role} {arm.requests} requests in {arm.reps} repetitions"
        for role in ROLES
        if few_samples(arm := getattr(cell, role))
    )
    return (
        f"too few samples ({short}; at least {MIN_POOLED_REQUESTS} pooled requests in "
        f"{MIN_REPS} repetitions per arm)"
    )
