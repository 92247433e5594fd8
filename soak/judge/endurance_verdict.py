"""What the verdict and the live view make of the endurance judgement.

- :func:`endurance_reasons`: a breached fail-tier drift or leak threshold FAILS the run
  (``endurance_drift``, ``endurance_leak``) in the finding's own words; a note-tier one
  (``,note``, the default policy's gentler items) is a note. A threshold without data is
  not here: ``soak.judge.thresholds.threshold_reasons`` makes it INVALID like any other.
- A run too short to judge gets a note (``endurance_not_judged``) only when it ran at
  least half the windows a trend needs: such a run was plausibly meant to be judged and
  fell short; a shorter one (a demo, a quick check) says it only in the record's
  ``endurance.not_judged_why``, so every quick run does not carry the same note.
- :func:`endurance_view`: the snapshot's :class:`EnduranceView`, refreshed when a window
  closes: per figure and resource its change or rate and its state against the policy
  (``close``: the trend is significant and past half the bound; a note-tier breach shows
  as ``close`` too, since it will not fail the run), and the header's badge, the worst
  of them (``not_judged`` until a trend can be judged).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from soak.judge.endurance import MIN_WINDOWS
from soak.judge.endurance_words import resource_words
from soak.judge.soak_policy import DEFAULT_POLICY
from soak.judge.thresholds import OPS, breached_live_reason, format_duration, format_value, is_note
from soak.judge.trend_metrics import TrendFigure, is_trend_metric, trend_figures
from soak.record.endurance import (
    FIGURES,
    Endurance,
    EnduranceView,
    FigureNow,
    LeakNow,
    WindowFigures,
    figure_value,
)
from soak.record.models import Reason
from soak.record.sections import ThresholdState

NowState = Literal["ok", "close", "breached", "no_data"]
_RANK: dict[str, int] = {"no_data": 0, "ok": 1, "close": 2, "breached": 3}


def endurance_reasons(e: Endurance | None, states: Sequence[ThresholdState]) -> list[Reason]:
    """The verdict's reasons from the drift and leak thresholds' final ``states`` (those
    with data; see the module docstring) and the note for a run too short to judge."""
    findings = _finding_words(e)
    defaults = set(DEFAULT_POLICY) if e is not None and e.policy_source == "default" else set()
    out: list[Reason] = []
    for s in states:
        if not is_trend_metric(s.metric) or s.state == "no_data":
            continue
        reason = _state_reason(s, findings.get(s.metric), s.expr in defaults)
        if reason is not None:
            out.append(reason)
    if (
        e is not None
        and not e.judged
        and e.policy
        and e.judged_windows >= math.ceil(MIN_WINDOWS / 2)
    ):
        out.append(
            Reason(
                code="endurance_not_judged",
                effect="note",
                message=f"endurance not judged ({e.not_judged_why}): no drift or leak verdict",
            )
        )
    if e is not None and e.judged:  # rises from the start of a short run: said, not judged
        out += [
            Reason(code="endurance_unsettled", effect="note", message=leak.words)
            for leak in e.leaks
            if leak.unsettled
        ]
    return out


def _finding_words(e: Endurance | None) -> dict[str, str]:
    if e is None:
        return {}
    out = {f"drift.{d.figure}": d.words for d in e.drift if d.words}
    out |= {f"leak.{f.resource}": f.words for f in e.leaks if f.words}
    return out


def _state_reason(s: ThresholdState, words: str | None, default: bool) -> Reason | None:
    first = s.first_breach_s
    if s.state == "breached":
        what = words or f"{s.metric} {format_value(s.metric, s.observed)}"
        label = " (default soak policy)" if default else ""
        live = f"; first breached live at {format_duration(first)}" if first is not None else ""
        return Reason(
            code="endurance_drift" if s.metric.startswith("drift.") else "endurance_leak",
            effect="note" if is_note(s.expr) else "failed",
            message=f"{s.condition} breached{label}: {what}{live}",
        )
    return breached_live_reason(s, first)


def endurance_view(
    e: Endurance,
    states: Sequence[ThresholdState],
    *,
    last: WindowFigures | None = None,
    warmup_left_s: float | None = None,
) -> EnduranceView:
    """The live view of ``e`` against the policy's ``states``
    (:func:`soak.judge.soak_policy.policy_states`): ``now`` is the ``last`` window's
    value (the end windows' median without it); ``change`` is the judged one (end
    windows against the baseline), the figure thresholds check."""
    figures = trend_figures(e)
    by_metric: dict[str, list[ThresholdState]] = {}
    for s in states:
        by_metric.setdefault(s.metric, []).append(s)
    rows = [
        FigureNow(
            figure=d.figure,
            baseline=d.baseline,
            now=_now(last, d.figure, d.end),
            change=d.change,
            state=_worst(by_metric.get(f"drift.{d.figure}", []), figures[f"drift.{d.figure}"]),
            significant=figures[f"drift.{d.figure}"].significant,
        )
        for d in e.drift
        if d.state != "no_data"
    ]
    leaks = [
        LeakNow(
            resource=f.resource,
            rate_per_h=f.rate_per_h,
            unit=f.unit,
            state=_worst(by_metric.get(f"leak.{f.resource}", []), figures[f"leak.{f.resource}"]),
            significant=figures[f"leak.{f.resource}"].significant,
        )
        for f in e.leaks
        if f.state != "no_data"
    ]
    badge, badge_words = _badge(e, states, figures)
    return EnduranceView(
        window_s=e.window_s,
        windows=e.windows,
        warmup_left_s=warmup_left_s,
        judged=e.judged,
        not_judged_why=e.not_judged_why,
        figures=rows,
        leaks=leaks,
        badge=badge,
        badge_words=badge_words,
    )


def _now(last: WindowFigures | None, figure: str, end: float | None) -> float | None:
    if last is None:
        return end
    return figure_value(last, figure)


def _one_state(s: ThresholdState, fig: TrendFigure | None) -> NowState:
    if s.state == "breached":
        return "close" if is_note(s.expr) else "breached"
    if s.state == "no_data" or s.observed is None:
        return "no_data"
    half = s.limit / 2.0
    if fig is not None and fig.significant and not OPS[_op(s)](s.observed, half):
        return "close"
    return "ok"


def _op(s: ThresholdState) -> str:
    """The comparison of a state's condition (``drift.x>-10%`` → ``>``)."""
    rest = s.condition[len(s.metric) :]
    return next(op for op in ("<=", ">=", "==", "!=", "<", ">") if rest.startswith(op))


def _worst(states: Sequence[ThresholdState], fig: TrendFigure | None) -> NowState:
    if not states:
        return "ok"
    return max((_one_state(s, fig) for s in states), key=lambda st: _RANK[st])


def _badge(
    e: Endurance, states: Sequence[ThresholdState], figures: Mapping[str, TrendFigure]
) -> tuple[Literal["ok", "close", "breached", "not_judged"], str | None]:
    if not e.judged:
        return "not_judged", e.not_judged_why
    ranked = [(s, _one_state(s, figures.get(s.metric))) for s in states]
    ranked = [(s, st) for s, st in ranked if st in ("close", "breached")]
    if not ranked:
        return "ok", None
    s, st = max(ranked, key=lambda pair: _RANK[pair[1]])
    what = _short(s.metric)
    note = "note: " if is_note(s.expr) else ""
    bound = format_value(s.metric, s.limit)
    badge: Literal["close", "breached"] = "breached" if st == "breached" else "close"
    return badge, f"{note}{what} {format_value(s.metric, s.observed)} (bound {bound})"


def _short(metric: str) -> str:
    kind, _, name = metric.partition(".")
    if kind == "drift" and name in FIGURES:
        return FIGURES[name].words
    return resource_words(name) if kind == "leak" else metric
