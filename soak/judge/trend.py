"""Robust trends over a window series: Theil–Sen, Mann–Kendall and a change point.

A soak's figures are noisy window to window (request mix, batching, GC), so a drift or a
leak is judged on rank statistics that a few wild windows cannot swing:

- **Mann–Kendall** (``S = Σ sign(yⱼ − yᵢ)`` over pairs i < j) tests for a monotone trend;
  its variance is corrected for ties (a failure rate that is mostly 0) and, after
  Yue & Wang (2004), inflated for the lag-1 autocorrelation of the residuals (a slowly
  wandering gauge looks like a trend to the plain test). The residuals are taken against the best
  change-point fit below, not a straight line, so a real step does not read as
  autocorrelated noise and hide itself. The inflation is never below 1: the correction
  only ever makes the test more careful.
- **Theil–Sen**: the slope is the median of the pairwise slopes; its 95 % interval is
  Sen's (1968), the order statistics of the pairwise slopes at ``(N ∓ z·√Var S) / 2``.
- **Change point**: the onset of the change, as the best least-squares fit of two
  shapes over every candidate window: a *hinge* (flat, then linear from the knot; a knot
  at the first point is a straight line) and a *step* (one level, then another); a
  straight line unless a placed change pays for itself (BIC). Positive series are fit
  with weights 1/level² (noise in proportion to the level: relative_weights).

Cost is quadratic in the points (pairwise slopes), and this runs for every figure each
time a window closes, live. Beyond :data:`MAX_POINTS` points the series is cut into that
many contiguous blocks, each one point (its mean time, its median value): a trend over
more windows than that is the same trend, and a change point is then placed to within a
block. At 300 points a figure costs a few milliseconds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from soak.record.endurance import Trend

Floats = npt.NDArray[np.float64]

MAX_POINTS = 300
"""Points beyond which the series is reduced to block medians (see the module docstring)."""
ALPHA = 0.001
"""The two-sided level at which Mann–Kendall's trend is significant. Stricter than the
usual 0.05: a soak judges some two dozen figures at every window, and an alarm must mean
something."""
Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975 (Sen's 95 % interval)."""


@dataclass(frozen=True)
class MannKendall:
    """The Mann–Kendall statistic, its (corrected) variance and the two-sided test."""

    s: float
    var_s: float
    z: float
    p: float


@dataclass(frozen=True)
class ChangePoint:
    """Where a change began: ``onset`` in the series' time unit, and the shape that fit."""

    onset: float
    shape: Literal["hinge", "step"]
    index: int
    """The first point of the changed part (the knot, or the first after the step)."""


def bounded(t: Floats, y: Floats, cap: int = MAX_POINTS) -> tuple[Floats, Floats]:
    """The series itself when it has at most ``cap`` points; else ``cap`` contiguous
    blocks, each its mean time and median value."""
    n = len(t)
    if n <= cap:
        return t, y
    edges = np.linspace(0, n, cap + 1).astype(np.intp)
    starts, sizes = edges[:-1], np.diff(edges)
    t_out = np.add.reduceat(t, starts) / sizes
    y_out = np.empty(cap, dtype=np.float64)
    # Blocks are of (at most) two sizes: one vectorised median per size.
    for size in np.unique(sizes):
        which = np.flatnonzero(sizes == size)
        index = starts[which][:, None] + np.arange(size)[None, :]
        y_out[which] = np.median(y[index], axis=1)
    return t_out, y_out


@functools.lru_cache(maxsize=8)
def _pairs(n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Every pair i < j of n points (cached: a live run asks for the same n again)."""
    return np.triu_indices(n, k=1)


def pairwise_slopes(t: Floats, y: Floats) -> Floats:
    """Every (yⱼ − yᵢ) / (tⱼ − tᵢ) for i < j with tⱼ ≠ tᵢ."""
    i, j = _pairs(len(t))
    dt = t[j] - t[i]
    keep = dt != 0
    slopes: Floats = (y[j][keep] - y[i][keep]) / dt[keep]
    return slopes


def tie_corrected_variance(y: Floats) -> float:
    """Var S under no trend, less the ties' share: n(n−1)(2n+5) − Σ t(t−1)(2t+5), / 18."""
    n = len(y)
    _, counts = np.unique(y, return_counts=True)
    ties = float(np.sum(counts * (counts - 1) * (2 * counts + 5)))
    return (n * (n - 1) * (2 * n + 5) - ties) / 18.0


def average_ranks(x: Floats) -> Floats:
    """Ranks from 0, ties sharing their average (equal values must not read as ordered)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    average = np.cumsum(counts) - (counts + 1) / 2.0
    ranks: Floats = average[inverse].astype(np.float64)
    return ranks


def autocorrelation_inflation(residuals: Floats) -> float:
    """The variance inflation n/n* = 1 + 2 Σₖ (1 − k/n) ρ₁ᵏ of an AR(1) series with the
    residuals' lag-1 rank autocorrelation ρ₁ (Yue & Wang 2004); 1 when ρ₁ ≤ 0 or under
    8 points, never below 1."""
    n = len(residuals)
    if n < 8:
        return 1.0
    ranks = average_ranks(residuals)
    ranks -= ranks.mean()
    denom = float(np.dot(ranks, ranks))
    if denom == 0:
        return 1.0
    rho = float(np.dot(ranks[:-1], ranks[1:])) / denom
    if rho <= 0:
        return 1.0
    k = np.arange(1, n, dtype=np.float64)
    return max(1.0, 1.0 + 2.0 * float(np.sum((1.0 - k / n) * rho**k)))


def mann_kendall(y: Floats, inflation: float = 1.0) -> MannKendall:
    """The Mann–Kendall test of ``y`` (in time order), ties corrected, its variance
    multiplied by ``inflation`` (:func:`autocorrelation_inflation`)."""
    i, j = _pairs(len(y))
    s = float(np.sum(np.sign(y[j] - y[i])))
    var_s = tie_corrected_variance(y) * inflation
    if var_s <= 0:
        return MannKendall(s=s, var_s=0.0, z=0.0, p=1.0)
    z = (s - math.copysign(1.0, s)) / math.sqrt(var_s) if s != 0 else 0.0
    return MannKendall(s=s, var_s=var_s, z=z, p=math.erfc(abs(z) / math.sqrt(2.0)))


def sen_interval(slopes: Floats, var_s: float, z: float = Z_95) -> tuple[float, float]:
    """Sen's interval of the Theil–Sen slope: the pairwise slopes of rank
    ``(N − z√Var S)/2`` and ``(N + z√Var S)/2 + 1`` (clamped to the ends)."""
    n = len(slopes)
    ordered = slopes if _is_sorted(slopes) else np.sort(slopes)
    c = z * math.sqrt(max(var_s, 0.0))
    lo = min(max(round((n - c) / 2.0), 1), n)
    hi = min(max(round((n + c) / 2.0) + 1, 1), n)
    return float(ordered[lo - 1]), float(ordered[hi - 1])


def _is_sorted(a: Floats) -> bool:
    return bool(np.all(a[:-1] <= a[1:]))


def change_point(t: Floats, y: Floats, w: Floats | None = None) -> ChangePoint | None:
    """The onset of the change in ``y``: the best (weighted) least-squares hinge or step
    over every candidate point (None under 4 points). A hinge's onset is its knot; a
    step's is halfway between the last point before it and the first after. A straight
    line (a knot at the first point: monotone from the start) wins unless the better fit
    pays for its placed change, by BIC: n·ln(SSE_line / SSE) > 2·ln n (the change's
    level or slope, and where it is, as two more parameters)."""
    n = len(t)
    if n < 4:
        return None
    w = np.ones(n) if w is None else w
    hinge_k, hinge_sse, line_sse = _best_hinge(t, y, w)
    step_k, step_sse = _best_step(y, w)
    best_sse = min(hinge_sse, step_sse)
    yc = y - float(np.dot(w, y)) / float(w.sum())
    tiny = 1e-12 * max(float(np.dot(w, yc * yc)), 1e-300)
    if n * math.log((line_sse + tiny) / (best_sse + tiny)) <= 2.0 * math.log(n):
        return ChangePoint(onset=float(t[0]), shape="hinge", index=0)
    if step_sse < hinge_sse:
        return ChangePoint(
            onset=float((t[step_k - 1] + t[step_k]) / 2.0), shape="step", index=step_k
        )
    return ChangePoint(onset=float(t[hinge_k]), shape="hinge", index=hinge_k)


def relative_weights(t: Floats, y: Floats) -> Floats | None:
    """Weights 1/level² from a first, unweighted change-point fit, for a positive
    series: latencies and rates are noisy in proportion to their level, and unweighted
    least squares would let the loudest windows (a TTFT at 15 s against 0.5 s) place
    the change alone. None for a series that is not positive."""
    if len(y) < 4 or not bool(np.all(y > 0)):
        return None
    level = y - _residuals(t, y, change_point(t, y))
    floor = 1e-3 * float(np.median(y))
    weights: Floats = 1.0 / np.maximum(level, floor) ** 2
    return weights


def _best_hinge(t: Floats, y: Floats, w: Floats) -> tuple[int, float, float]:
    """The knot (index) whose flat-then-linear fit leaves the least weighted squared
    error, that error, and the straight line's (the knot at the first point); the knot
    leaves at least two points after it."""
    total = float(w.sum())
    knots = t[: len(t) - 2]
    x = np.maximum(0.0, t[None, :] - knots[:, None])
    xc = x - ((x @ w) / total)[:, None]
    yc = y - float(np.dot(w, y)) / total
    sxx = (xc * xc) @ w
    sxy = xc @ (w * yc)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(sxx > 0, sxy * sxy / sxx, 0.0)
    # Cancellation can leave a hair below zero on an exact fit.
    sse = np.maximum(float(np.dot(w, yc * yc)) - explained, 0.0)
    k = int(np.argmin(sse))
    return k, float(sse[k]), float(sse[0])


def _best_step(y: Floats, w: Floats) -> tuple[int, float]:
    """The first index of the second level whose two-level fit leaves the least
    weighted squared error; each level holds at least two points."""
    n = len(y)
    cw, cwy, cwy2 = np.cumsum(w), np.cumsum(w * y), np.cumsum(w * y * y)
    k = np.arange(2, n - 1)
    wl, sl, ql = cw[k - 1], cwy[k - 1], cwy2[k - 1]
    wr, sr, qr = cw[-1] - wl, cwy[-1] - sl, cwy2[-1] - ql
    # Each level's weighted squared error: Σw·y² − (Σw·y)²/Σw.
    sse = np.maximum((ql - sl * sl / wl) + (qr - sr * sr / wr), 0.0)
    best = int(np.argmin(sse))
    return int(k[best]), float(sse[best])


def _line_residuals(x: Floats, y: Floats) -> Floats:
    """``y`` less its least-squares line over ``x`` (less its mean when ``x`` is flat)."""
    xc = x - x.mean()
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, y - y.mean())) / sxx if sxx > 0 else 0.0
    out: Floats = y - y.mean() - slope * xc
    return out


def _residuals(t: Floats, y: Floats, cp: ChangePoint | None) -> Floats:
    """``y`` less its best change-point fit (a straight line without one)."""
    if cp is None:
        return _line_residuals(t, y)
    if cp.shape == "step":
        fit: Floats = np.where(
            np.arange(len(y)) < cp.index, y[: cp.index].mean(), y[cp.index :].mean()
        )
        return y - fit
    return _line_residuals(np.maximum(0.0, t - t[cp.index]), y)


@dataclass(frozen=True)
class TrendFit:
    """A series' trend (the record's :class:`Trend`, per hour) and its change point (in
    the series' time unit), with the test's corrected variance."""

    trend: Trend
    change: ChangePoint | None
    intercept: float | None = None
    """Theil–Sen's intercept (median of yᵢ − slope·tᵢ), in the figure's unit."""


def fit_trend(t_s: Floats, y: Floats, *, min_points: int, alpha: float = ALPHA) -> TrendFit:
    """The trend of ``y`` over times ``t_s`` (seconds): Theil–Sen slope per hour with
    Sen's 95 % interval, Mann–Kendall (ties and autocorrelation corrected) and the
    direction — ``rising``/``falling`` only when p < ``alpha`` and the interval excludes
    zero; ``unknown`` under ``min_points``. Bounded to :data:`MAX_POINTS` points."""
    n = len(y)
    if n < max(min_points, 3):
        return TrendFit(trend=Trend(n=n), change=None)
    t, v = bounded(np.asarray(t_s, dtype=np.float64), np.asarray(y, dtype=np.float64))
    slopes = np.sort(pairwise_slopes(t, v))
    slope = float(np.median(slopes))
    cp = change_point(t, v, relative_weights(t, v))
    residuals = _residuals(t, v, cp)
    # An exact fit leaves rounding dust, whose "autocorrelation" means nothing.
    exact = np.ptp(residuals) <= 1e-9 * max(float(np.ptp(v)), 1e-300)
    mk = mann_kendall(v, 1.0 if exact else autocorrelation_inflation(residuals))
    lo, hi = sen_interval(slopes, mk.var_s)
    direction: Literal["rising", "falling", "flat"] = "flat"
    if mk.p < alpha and lo > 0:
        direction = "rising"
    elif mk.p < alpha and hi < 0:
        direction = "falling"
    trend = Trend(
        n=n,
        slope_per_h=slope * 3600.0,
        slope_lo_per_h=lo * 3600.0,
        slope_hi_per_h=hi * 3600.0,
        mk_z=mk.z,
        mk_p=mk.p,
        direction=direction,
    )
    return TrendFit(trend=trend, change=cp, intercept=float(np.median(v - slope * t)))
