"""The soak judged on its timeline: drift of every figure, leaks of every resource.

:func:`judge_endurance` turns the window series (``soak.record.endurance``) into the
record's :class:`Endurance`; the live tick calls it again each time a window closes and
shows :func:`endurance_view`; the verdict adds :func:`endurance_reasons`.

- **Judged windows**: the whole ``load`` windows (``partial`` and ``drain`` never count).
  Without a warm-up the first of them is the ramp (workers starting, caches cold) and is
  left out too.
- **Too short**: under :data:`MIN_WINDOWS` judged windows there is no trend verdict:
  ``judged`` is False, ``not_judged_why`` says so ("4 windows of 60 s; a trend needs 8
  (8 min)") and every finding is ``no_data`` — never "stable". Eight points is also
  where Mann–Kendall at :data:`soak.judge.trend.ALPHA` can first tolerate a few
  out-of-order windows.
- **Baseline and end**: the first and the last B judged windows, B = n // 6 held to
  3…10 (a tenth to a sixth of the run, at most 10 windows); each figure's baseline and
  end are the medians of its values there.
- **Drift**: the change from baseline to end (relative; in points for ratio figures,
  :mod:`soak.judge.trend_metrics`), the trend over every judged window
  (:func:`soak.judge.trend.fit_trend`), and ``drift`` only when the trend is significant
  the bad way and the change passes the kind's floor. Its change point is ``since_s``;
  a moment (a fault, a canary's first failure, an engine restart) within one window of
  it is ``since_event``.
- **Leaks**: the Theil–Sen rate per hour, and ``leak`` only when the growth is
  significant, material (:data:`soak.judge.trend_metrics.LEAK_FLOOR`), did not come
  back (a sawtooth whose troughs return to within a quarter of the rise above the
  baseline is GC, not a leak: ``returned``) and had not levelled off (the last third
  still rising by at least a quarter of the whole rise: a cache that filled early is
  not a leak). KV usage is judged *at equal load*: when the engine's running requests
  themselves drifted (either way) the KV finding is ``no_data`` and says why.

Calibration (``tests/core/test_endurance.py``, synthetic series): over 200 seeds of
healthy noise — lognormal jitter of 5–20 % on every figure, a GC-like sawtooth in
memory, flat GPU memory, rare failures, 8 to 120 windows — no default-policy threshold
breaches and no fail-tier figure drifts; with Mann–Kendall at p < 0.01 instead of
:data:`soak.judge.trend.ALPHA` (0.001) one short run in a few hundred raised a false
drift. Caught, over two hours of minute windows at 5 % jitter: throughput −30 %/2 h,
TTFT p99 0.4 → 4 s, server RSS +300 MB/h, KV usage +0.3/h, a −25 % step; the step and
the TTFT creep placed within one window of their onset (a gentle creep that starts
mid-run is caught, but its onset is uncertain by tens of windows: see the test). The
price of the strict level: over 8–12 windows a trend must be nearly monotone to count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from soak.judge import endurance_words as words
from soak.judge.soak_policy import policy_source
from soak.judge.thresholds import Threshold, format_duration
from soak.judge.trend import Floats, fit_trend
from soak.judge.trend_metrics import (
    LEAK_FLOOR,
    LEAK_RELATIVE_FLOOR,
    LEAK_UNITS,
    bad_way,
    drift_change,
    drift_significant,
)
from soak.record.endurance import (
    FIGURES,
    LEAKS,
    DriftFinding,
    Endurance,
    LeakFinding,
    WarmupInfo,
    WindowFigures,
    figure_value,
)
from soak.record.faults import when as fault_when

MIN_WINDOWS = 8
"""Judged windows a trend needs (see the module docstring)."""
BASELINE_MIN, BASELINE_MAX = 3, 10
RETURN_SHARE = 0.25
"""A rise counts as returned when the end's lowest window is within this share of the
rise above the baseline."""
LEVELLED_SHARE = 0.25
"""A rise has levelled off when the last third added less than this share of it."""

Moment = tuple[float, str]
"""Seconds since the run's origin and words: a fault, a canary's first failure, ..."""


def baseline_size(n: int) -> int:
    """B: the windows in the baseline and in the end (n // 6, held to 3…10)."""
    return max(BASELINE_MIN, min(BASELINE_MAX, n // 6))


def judged_windows(
    windows: Sequence[WindowFigures], warmup: WarmupInfo | None
) -> list[WindowFigures]:
    """The whole load windows, in order; without a warm-up the first (the ramp) is left
    out."""
    load = sorted((w for w in windows if w.kind == "load"), key=lambda w: w.i)
    return load[1:] if warmup is None else load


@dataclass(frozen=True)
class _Series:
    """The judged windows and what the findings need to place and word a change."""

    windows: list[WindowFigures]
    b: int
    window_s: int
    moments: Sequence[Moment]
    when: Callable[[float], str]

    def points(self, figure: str) -> tuple[list[int], Floats, Floats]:
        """Positions (in the judged windows), mid times and values of the windows where
        the figure has a value."""
        pos, t, y = [], [], []
        for k, w in enumerate(self.windows):
            v = figure_value(w, figure)
            if v is not None and np.isfinite(v):
                pos.append(k)
                t.append((w.start_s + w.end_s) / 2.0)
                y.append(v)
        return pos, np.array(t, dtype=np.float64), np.array(y, dtype=np.float64)

    def ends(self, pos: list[int], y: Floats) -> tuple[float | None, float | None]:
        """The medians of the values in the baseline and the end windows."""
        n = len(self.windows)
        first = [v for k, v in zip(pos, y, strict=True) if k < self.b]
        last = [v for k, v in zip(pos, y, strict=True) if k >= n - self.b]
        return (
            float(np.median(first)) if first else None,
            float(np.median(last)) if last else None,
        )

    def span(self) -> str:
        return format_duration(self.b * self.window_s)

    def window_start(self, t: float) -> float:
        """The start of the judged window holding ``t`` (the first or last beyond)."""
        for w in self.windows:
            if t < w.end_s:
                return max(w.start_s, self.windows[0].start_s)
        return self.windows[-1].start_s

    def moment_near(self, t: float) -> str | None:
        """The moment nearest ``t`` within one window of it."""
        near = [(abs(m - t), what) for m, what in self.moments if abs(m - t) <= self.window_s]
        return min(near)[1] if near else None


def judge_endurance(
    windows: Sequence[WindowFigures],
    *,
    window_s: int,
    series_start_s: float | None,
    warmup: WarmupInfo | None,
    policy: Sequence[Threshold] = (),
    moments: Sequence[Moment] = (),
    when: Callable[[float], str] | None = None,
) -> Endurance:
    """The run judged on its timeline (see the module docstring). ``policy``: the drift
    and leak thresholds applied (:func:`soak.judge.soak_policy.policy_for`), recorded;
    ``when`` words a time since the run's origin (``soak.record.faults.when`` with the
    load start; without it, seconds since the run began)."""
    judged = judged_windows(windows, warmup)
    n = len(judged)
    e = Endurance(
        window_s=window_s,
        series_start_s=series_start_s,
        warmup=warmup,
        windows=len(windows),
        judged_windows=n,
        policy=[t.expr for t in policy],
        policy_source=policy_source(policy),
    )
    if n < MIN_WINDOWS:
        return _not_judged(e, n)
    s = _Series(judged, baseline_size(n), window_s, moments, when or _seconds_words)
    drift = [drift_finding(s, name) for name in FIGURES]
    running = next(d for d in drift if d.figure == "engine.running")
    return e.model_copy(
        update={
            "judged": True,
            "baseline": [judged[0].i, judged[s.b - 1].i],
            "end": [judged[n - s.b].i, judged[-1].i],
            "drift": drift,
            "leaks": [leak_finding(s, resource, running) for resource in LEAKS],
        }
    )


def _seconds_words(t_s: float) -> str:
    return fault_when(t_s, None)


def _not_judged(e: Endurance, n: int) -> Endurance:
    why = words.not_judged_words(n, e.window_s, MIN_WINDOWS)
    return e.model_copy(
        update={
            "not_judged_why": why,
            "drift": [
                DriftFinding(figure=name, unit=info.unit, words=f"{info.words}: not judged ({why})")
                for name, info in FIGURES.items()
            ],
            "leaks": [
                LeakFinding(
                    resource=r,
                    unit=LEAK_UNITS[r],
                    words=f"{words.resource_words(r)}: not judged ({why})",
                )
                for r in LEAKS
            ],
        }
    )


def drift_finding(s: _Series, name: str) -> DriftFinding:
    """One figure from its baseline to its end, with its trend and, for a drift, when
    it began."""
    info = FIGURES[name]
    pos, t, y = s.points(name)
    if len(y) < MIN_WINDOWS:
        return DriftFinding(
            figure=name, unit=info.unit, words=words.too_few_words(info.words, len(y), MIN_WINDOWS)
        )
    baseline, end = s.ends(pos, y)
    if baseline is None or end is None:
        where = "baseline" if baseline is None else "end"
        return DriftFinding(
            figure=name, unit=info.unit, words=f"{info.words}: no value in the {where} windows"
        )
    fit = fit_trend(t, y, min_points=MIN_WINDOWS)
    f = DriftFinding(
        figure=name,
        unit=info.unit,
        baseline=baseline,
        end=end,
        change=drift_change(info, baseline, end),
        trend=fit.trend,
    )
    significant = drift_significant(f)
    if not (significant and bad_way(f)):
        tail = words.stable_tail(f, significant)
        stable = words.drift_words(f, s.span(), tail)
        return f.model_copy(update={"state": "stable", "words": stable})
    onset = fit.change.onset if fit.change is not None else float(t[0])
    since = s.window_start(onset)
    event = s.moment_near(since)
    shape = fit.change.shape if fit.change is not None else None
    tail = words.since_tail(shape, s.when(since).removeprefix("at "), event)
    return f.model_copy(
        update={
            "state": "drift",
            "since_s": since,
            "since_event": event,
            "words": words.drift_words(f, s.span(), tail),
        }
    )


def leak_finding(s: _Series, resource: str, running: DriftFinding | None = None) -> LeakFinding:
    """One resource's growth per hour, and whether it is a leak."""
    name = LEAKS[resource]
    what = words.resource_words(resource)
    unit = LEAK_UNITS[resource]
    pos, t, y = s.points(name)
    if len(y) < MIN_WINDOWS:
        return LeakFinding(
            resource=resource, unit=unit, words=words.too_few_words(what, len(y), MIN_WINDOWS)
        )
    first, last = s.ends(pos, y)
    if first is None or last is None:
        return LeakFinding(
            resource=resource, unit=unit, words=f"{what}: no value in the baseline or end windows"
        )
    fit = fit_trend(t, y, min_points=MIN_WINDOWS).trend
    f = LeakFinding(
        resource=resource,
        unit=unit,
        rate_per_h=fit.slope_per_h,
        rate_lo_per_h=fit.slope_lo_per_h,
        rate_hi_per_h=fit.slope_hi_per_h,
        mk_p=fit.mk_p,
        first=first,
        last=last,
        peak=float(np.max(y)),
    )
    if resource == "kv_usage" and running is not None and drift_significant(running):
        change = words.change_words(FIGURES["engine.running"], running.change or 0.0)
        why = (
            f"{what} not judged as a leak: the load changed (running requests {change}), "
            "so the KV usage was not at equal load"
        )
        return f.model_copy(update={"words": why})
    shape = leak_shape(resource, fit.direction, first, last, y, s.b)
    returned = None if fit.direction != "rising" else shape == "returned"
    return f.model_copy(
        update={
            "returned": returned,
            "state": "leak" if shape == "leak" else "stable",
            "words": words.leak_words(f, shape),
        }
    )


def leak_shape(resource: str, direction: str, first: float, last: float, y: Floats, b: int) -> str:
    """``leak``, or why not: ``flat`` (no significant rise), ``returned``, ``small``
    (under the floor) or ``levelled`` (see the module docstring)."""
    if direction != "rising":
        return "flat"
    peak = float(np.max(y))
    rise = peak - first
    if rise > 0 and float(np.min(y[-b:])) <= first + RETURN_SHARE * rise:
        return "returned"
    floor = LEAK_FLOOR[resource]
    if LEAK_UNITS[resource].endswith("B/h"):
        floor = max(floor, LEAK_RELATIVE_FLOOR * abs(first))
    if last - first < floor:
        return "small"
    thirds = np.array_split(y, 3)
    m1, m2, m3 = (float(np.median(part)) for part in thirds)
    if m3 - m1 > 0 and (m3 - m2) < LEVELLED_SHARE * (m3 - m1):
        return "levelled"
    return "leak"
