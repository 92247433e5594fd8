"""Robust trends over a window series: Mann–Kendall, Theil–Sen and the guards that
keep noise from reading as a trend.

A soak's figures are noisy window to window (request mix, batching, GC, tokens counted
when a request ends), so a drift or a leak is judged on rank statistics that a few wild
windows cannot swing. A trend counts (``rising``/``falling``) only when

1. **Sen's 95 % interval** of the Theil–Sen slope (the median of the pairwise slopes;
   Sen 1968) excludes zero (an end exactly at zero is allowed: the ties of a step up
   from a run of zeros put it there), and
2. **Mann–Kendall** (``S = Σ sign(yⱼ − yᵢ)`` over pairs i < j, variance corrected for
   ties and autocorrelation) finds the monotone trend at p < :data:`ALPHA` (0.001) and
   the change is **clear of the noise** by :data:`NOISE_Z` (3) standard errors — or,
   over :data:`LARGE_MIN_POINTS` (12) points or more, at p < :data:`ALPHA_LARGE` (0.01)
   for a change :data:`NOISE_Z_LARGE` (6) standard errors clear. Clear of the noise
   (:func:`noise_z`): the medians of the first and the last few points (the judge's
   baseline and end) differ by that many standard errors of the window-to-window
   scatter.

Why these levels. Without the autocorrelation inflation below (which was what hid
them), large real degradations over few windows pass p < 0.001 easily: ten strictly
monotone windows give p ≈ 10⁻⁴, and the demo's throughput decay and TTFT creep over
16 windows give 10⁻⁴ to 10⁻⁶. A looser level for everything buys little and costs
false alarms: at 0.01, about 1 % of healthy synthetic runs raised one (0.5 % with the
noise guard). The one shape the strict level cannot see over few windows is a step:
Mann–Kendall counts ordered pairs, and 16 windows that jump after the 7th (answers
that turn to garbage at a moment, after a run of zeros) reach p ≈ 0.004 at best. Such
a change is huge against the scatter, hence the second door (not under 12 points: the
scatter of 7–10 differences is itself too uncertain to be 6 standard errors from
anything). Even that door missed one such run in six or more on a loaded machine: the
scatter within each level orders the pairs at random, and S then fell to p ≈ 0.01–0.02.
So a large change Mann–Kendall misses is asked, under 24 points (where the windows are
taken as exchangeable, as the test itself takes them there), whether it is **one step**:
Pettitt's rank test (:func:`pettitt_p`) counts only the pairs across the best split, so
the order within the levels costs it nothing (a clean step after the 6th of 16 windows:
p ≈ 0.0015), and p < :data:`ALPHA_LARGE` there admits it through the same door. A step
whose onset falls inside a window takes two windows (part of it, then the rest), and the
whole series' differences count its second jump as scatter: the garbage-after soak of a
CI run (2026-12-04) was 5.92 standard errors clear of that scatter, about 10 clear of the
scatter within its two levels. So the step door is also asked when the change is
:data:`NOISE_Z_LARGE` clear of the scatter measured within the levels either side of
Pettitt's split (:func:`pettitt_split`), none of the differences across it; choosing the
split that best parts the levels flatters that scatter (and a level of tied values has
none), so the step must then pass at :data:`ALPHA`. The noise guard catches what the
test's own level lets through (a noisy run that happens to slope), and the judge adds
each figure's materiality floor and the policy's bound (``soak.judge.trend_metrics``).
Calibration:
``tests/core/test_endurance.py``.

Autocorrelation. A slowly wandering gauge looks like a trend to the plain test; after
Yue & Wang (2004) the variance of S is inflated by ``1 + 2 Σₖ (1 − k/n) ρᵏ`` for the
lag-1 rank autocorrelation ρ of the series' residuals about its trend. Two things make
that estimate mislead on short series, and both are handled:

- on ~10 residuals ρ is noise (its standard error is about 1/√n ≈ 0.3) and biased low,
  so it is estimated only from :data:`AUTOCORRELATION_MIN_POINTS` (24) points, with the
  small-sample correction ρ̂ = (nr + 1)/(n − 4) and capped at :data:`RHO_MAX`;
- the residuals are taken about the **isotonic** (monotone, pool-adjacent-violators)
  fit in the trend's direction, not a straight line or a hinge: a curved monotone trend
  (a decay as 1/(1 + kt), a rise that stops at a cap) leaves a line's residuals
  autocorrelated by construction, and the correction then hid the very trend it was
  testing. About a monotone fit such a trend leaves white residuals; a wandering gauge,
  which no monotone curve follows, keeps most of its autocorrelation.

Cost is quadratic in the points (pairwise slopes), and this runs for every figure each
time a window closes, live. Beyond :data:`MAX_POINTS` points the series is cut into that
many contiguous blocks, each one point (its mean time, its median value): a trend over
more windows than that is the same trend, and a change point
(:mod:`soak.judge.change_point`) is then placed to within a block.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from soak.judge.change_point import ChangePoint, Floats, change_point, isotonic, relative_weights
from soak.record.endurance import Trend

MAX_POINTS = 300
"""Points beyond which the series is reduced to block medians (see the module docstring)."""
ALPHA = 0.001
"""The two-sided level at which Mann–Kendall's trend is significant (see the module
docstring)..."""
ALPHA_LARGE = 0.01
"""...and the level for a change at least :data:`NOISE_Z_LARGE` standard errors clear of
the noise."""
Z_95 = 1.959963984540054
"""The standard normal quantile of 0.975 (Sen's 95 % interval)."""
AUTOCORRELATION_MIN_POINTS = 24
"""Points from which the lag-1 autocorrelation is estimated (below, no correction)."""
RHO_MAX = 0.9
"""The largest lag-1 autocorrelation the correction assumes (an inflation of about 16 at
60 points): beyond it the small-sample correction would extrapolate."""
NOISE_Z = 3.0
"""Standard errors of the scatter by which the ends' medians must differ (guard 3)..."""
NOISE_Z_LARGE = 6.0
"""...and by which they differ in a change judged at :data:`ALPHA_LARGE`..."""
LARGE_MIN_POINTS = 12
"""...over at least this many points (the scatter then rests on 11 differences or more)."""
END_MIN, END_MAX = 3, 10
"""The points at each end the noise guard compares (and the judge's baseline and end)."""
STEP_PERMUTATIONS = 1999
"""Shuffles behind Pettitt's step test (:func:`pettitt_p`): p to within 0.0005, and
1999 × 23 ranks at most (it is asked only under :data:`AUTOCORRELATION_MIN_POINTS`)."""
STEP_SEED = 20261204
"""The shuffles' seed: a record's trends recompute to the same p."""
_MEDIAN_SE = math.sqrt(math.pi / 2.0)
"""The standard error of a median of k normal values is about √(π/2)·σ/√k."""


def end_size(n: int) -> int:
    """The points at each end: n // 6, held to :data:`END_MIN`…:data:`END_MAX` (a tenth
    to a sixth of the run, at most 10)."""
    return max(END_MIN, min(END_MAX, n // 6))


@dataclass(frozen=True)
class MannKendall:
    """The Mann–Kendall statistic, its (corrected) variance and the two-sided test."""

    s: float
    var_s: float
    z: float
    p: float


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


@functools.lru_cache(maxsize=8)
def _upper(n: int) -> npt.NDArray[np.intp]:
    """The flat indices of the pairs i < j in an n × n matrix, row by row."""
    i, j = _pairs(n)
    flat: npt.NDArray[np.intp] = i * n + j
    return flat


def _differences(y: Floats) -> Floats:
    """Every yⱼ − yᵢ for i < j (one gather from the matrix of differences)."""
    d: Floats = (y[None, :] - y[:, None]).ravel()[_upper(len(y))]
    return d


@functools.lru_cache(maxsize=4)
def _time_gaps(times: bytes) -> Floats:
    """Every tⱼ − tᵢ for i < j of the times packed in ``times`` (cached: the figures of
    one judgement share their windows' times)."""
    gaps = _differences(np.frombuffer(times, dtype=np.float64))
    gaps.setflags(write=False)  # shared by every caller: nobody may change it
    return gaps


def pairwise_slopes(t: Floats, y: Floats, dy: Floats | None = None) -> Floats:
    """Every (yⱼ − yᵢ) / (tⱼ − tᵢ) for i < j with tⱼ ≠ tᵢ (``dy``: the differences of
    ``y`` when already taken)."""
    dt = _time_gaps(np.ascontiguousarray(t, dtype=np.float64).tobytes())
    dy = _differences(y) if dy is None else dy
    keep = dt != 0
    slopes: Floats = dy[keep] / dt[keep] if not bool(keep.all()) else dy / dt
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
    """The variance inflation n/n* = 1 + 2 Σₖ (1 − k/n) ρᵏ of an AR(1) series (Yue & Wang
    2004), ρ the residuals' lag-1 rank autocorrelation r corrected for its small-sample
    bias, (nr + 1)/(n − 4), and held to :data:`RHO_MAX`; 1 when ρ ≤ 0 or under
    :data:`AUTOCORRELATION_MIN_POINTS` points (see the module docstring), never below 1."""
    n = len(residuals)
    if n < AUTOCORRELATION_MIN_POINTS:
        return 1.0
    ranks = average_ranks(residuals)
    ranks -= ranks.mean()
    denom = float(np.dot(ranks, ranks))
    if denom == 0:
        return 1.0
    r = float(np.dot(ranks[:-1], ranks[1:])) / denom
    rho = min((n * r + 1.0) / (n - 4.0), RHO_MAX)
    if rho <= 0:
        return 1.0
    k = np.arange(1, n, dtype=np.float64)
    return max(1.0, 1.0 + 2.0 * float(np.sum((1.0 - k / n) * rho**k)))


def kendall_s(y: Floats, dy: Floats | None = None) -> float:
    """Mann–Kendall's S = Σ sign(yⱼ − yᵢ) over the pairs i < j of ``y`` (in time order;
    ``dy``: those differences when already taken)."""
    return float(np.sum(np.sign(_differences(y) if dy is None else dy)))


def mann_kendall(y: Floats, inflation: float = 1.0, s: float | None = None) -> MannKendall:
    """The Mann–Kendall test of ``y`` (in time order), ties corrected, its variance
    multiplied by ``inflation`` (:func:`autocorrelation_inflation`); ``s``: its S when
    already counted (:func:`kendall_s`)."""
    s = kendall_s(y) if s is None else s
    var_s = tie_corrected_variance(y) * inflation
    if var_s <= 0:
        return MannKendall(s=s, var_s=0.0, z=0.0, p=1.0)
    z = (s - math.copysign(1.0, s)) / math.sqrt(var_s) if s != 0 else 0.0
    return MannKendall(s=s, var_s=var_s, z=z, p=math.erfc(abs(z) / math.sqrt(2.0)))


def sen_interval(slopes: Floats, var_s: float, z: float = Z_95) -> tuple[float, float]:
    """Sen's interval of the Theil–Sen slope: the pairwise slopes of rank
    ``(N − z√Var S)/2`` and ``(N + z√Var S)/2 + 1`` (clamped to the ends)."""
    lo, _, hi = _slope_and_interval(slopes, var_s, z)
    return lo, hi


def _slope_and_interval(
    slopes: Floats, var_s: float, z: float = Z_95
) -> tuple[float, float, float]:
    """Sen's interval and, between, the median slope (Theil–Sen's), from one partition:
    a few order statistics, not a sort (this runs per figure at every window close)."""
    n = len(slopes)
    c = z * math.sqrt(max(var_s, 0.0))
    lo = min(max(round((n - c) / 2.0), 1), n)
    hi = min(max(round((n + c) / 2.0) + 1, 1), n)
    mid = sorted({(n - 1) // 2, n // 2})
    ordered = np.partition(slopes, sorted({lo - 1, hi - 1, *mid}))
    median = float(np.mean(ordered[mid]))
    return float(ordered[lo - 1]), median, float(ordered[hi - 1])


def noise_sd(y: Floats) -> float:
    """The scatter of one window about the local level: the robust spread of the first
    differences, 1.4826 · MAD(Δy) / √2. Differences cancel a slow trend, and the median
    shrugs off the one big difference of a step, so a trend does not count as noise."""
    if len(y) < 3:
        return 0.0
    return _differences_sd(np.diff(y))


def _differences_sd(d: Floats) -> float:
    """One window's scatter from first differences ``d``: 1.4826 · MAD(d) / √2."""
    return 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2.0)


def noise_z(y: Floats, ends: int, split: int | None = None) -> float:
    """How far apart the medians of the first and the last ``ends`` values are, in
    standard errors of that difference under no trend: √(π/2)·σ·√(2/ends), σ from
    :func:`noise_sd`. A positive series is compared in logarithms (its noise is in
    proportion to its level); a series without scatter (σ = 0) that moved is infinitely
    far (a gauge that only steps). ``split``: σ from the differences within the levels
    before and after it only (``y[:split]``, ``y[split:]``), none across it."""
    x = np.log(y) if bool(np.all(y > 0)) else y
    b = max(1, min(ends, len(x) // 2))
    change = abs(float(np.median(x[-b:])) - float(np.median(x[:b])))
    sd = noise_sd(x) if split is None else _within_levels_sd(x, split)
    se = _MEDIAN_SE * sd * math.sqrt(2.0 / b)
    if change == 0:
        return 0.0
    return change / se if se > 0 else math.inf


def _within_levels_sd(x: Floats, split: int) -> float:
    """:func:`noise_sd` from the differences inside ``x[:split]`` and inside
    ``x[split:]``: the scatter of each level about itself, the step between them left out."""
    d = np.concatenate((np.diff(x[:split]), np.diff(x[split:])))
    return _differences_sd(d) if len(d) >= 2 else 0.0


@dataclass(frozen=True)
class TrendFit:
    """A series' trend (the record's :class:`Trend`, per hour) and its change point (in
    the series' time unit), with the test's corrected variance."""

    trend: Trend
    change: ChangePoint | None
    intercept: float | None = None
    """Theil–Sen's intercept (median of yᵢ − slope·tᵢ), in the figure's unit."""


def fit_trend(
    t_s: Floats,
    y: Floats,
    *,
    min_points: int,
    alpha: float = ALPHA,
    ends: int | None = None,
    reciprocal: bool = False,
) -> TrendFit:
    """The trend of ``y`` over times ``t_s`` (seconds): Theil–Sen slope per hour with
    Sen's 95 % interval, Mann–Kendall (ties and autocorrelation corrected) and the
    direction — ``rising``/``falling`` only when p < ``alpha``, the interval excludes
    zero and the change is clear of the noise over ``ends`` points at each end (default
    :func:`end_size`), or a large change is one step (:func:`pettitt_p`, its p the
    trend's ``step_p``); ``unknown`` under ``min_points``. Its change point only for such
    a trend (nothing began otherwise), fit to 1/y when ``reciprocal`` (a throughput: a
    slowing engine adds time per token, so a decay as 1/(1 + kt) is a hinge there).
    Bounded to :data:`MAX_POINTS` points."""
    n = len(y)
    if n < max(min_points, 3):
        return TrendFit(trend=Trend(n=n), change=None)
    raw = np.asarray(y, dtype=np.float64)
    t, v = bounded(np.asarray(t_s, dtype=np.float64), raw)
    dy = _differences(v)
    s = kendall_s(v, dy)
    mk = mann_kendall(v, _inflation(v, rising=s >= 0), s)
    lo, slope, hi = _slope_and_interval(pairwise_slopes(t, v, dy), mk.var_s)
    direction: Literal["rising", "falling", "flat"] = "flat"
    # An interval end exactly at zero is the ties' (a step up from a run of zeros).
    way = 1.0 if lo >= 0 < hi else (-1.0 if hi <= 0 > lo else 0.0)
    step_p: float | None = None
    if way != 0:
        b = ends or end_size(n)
        z = noise_z(raw, b)
        large = z >= NOISE_Z_LARGE and n >= LARGE_MIN_POINTS
        if (mk.p < alpha and z >= NOISE_Z) or (large and mk.p < ALPHA_LARGE):
            direction = "rising" if way > 0 else "falling"
        elif LARGE_MIN_POINTS <= n < AUTOCORRELATION_MIN_POINTS and (
            large or noise_z(raw, b, pettitt_split(v)) >= NOISE_Z_LARGE
        ):
            # A large change Mann–Kendall missed: the within-level scatter of a step
            # spends its pairs (see the module docstring). Ask whether it is one step —
            # beyond doubt (ALPHA) when it is large only against its levels' own scatter:
            # the split that best parts the levels flatters how far apart they are.
            step_p = pettitt_p(v, way)
            if step_p < (ALPHA_LARGE if large else ALPHA):
                direction = "rising" if way > 0 else "falling"
    trend = Trend(
        n=n,
        slope_per_h=slope * 3600.0,
        slope_lo_per_h=lo * 3600.0,
        slope_hi_per_h=hi * 3600.0,
        mk_z=mk.z,
        mk_p=mk.p,
        direction=direction,
    )
    if step_p is not None:
        trend.step_p = step_p  # assigned, so written (absent unless asked)
    cp = None
    if direction != "flat":
        fit_to = 1.0 / v if reciprocal and bool(np.all(v > 0)) else v
        cp = change_point(t, fit_to, relative_weights(t, fit_to))
    return TrendFit(trend=trend, change=cp, intercept=float(np.median(v - slope * t)))


def pettitt_p(v: Floats, way: float, permutations: int = STEP_PERMUTATIONS) -> float:
    """Pettitt's test (1979) for one change in level of ``v``, by permutation: the share
    of ``permutations`` shuffles (from :data:`STEP_SEED`, so a verdict recomputes
    identically) whose K = maxₜ |Uₜ| reaches the series' own, Uₜ = 2·Σᵢ≤ₜ rᵢ − t(n + 1)
    over the (tie-averaged) ranks r. A series whose biggest split does not go ``way``
    (1: up, −1: down) is p = 1: it is not the step the trend says."""
    n = len(v)
    ranks = average_ranks(np.asarray(v, dtype=np.float64)) + 1.0
    u = _split_sums(ranks)
    at = int(np.argmax(np.abs(u)))
    # Uₜ < 0: the ranks before t are the small ones, a step up.
    if u[at] == 0 or (u[at] < 0) != (way > 0):
        return 1.0
    shuffled = np.random.default_rng(STEP_SEED).permuted(
        np.broadcast_to(ranks, (permutations, n)), axis=1
    )
    k = np.abs(_split_sums(shuffled)).max(axis=1)
    # Rank sums are multiples of ½: the tolerance only absorbs float dust.
    reached = int(np.count_nonzero(k >= abs(float(u[at])) - 1e-9))
    return (1 + reached) / (1 + permutations)


def pettitt_split(v: Floats) -> int:
    """Where Pettitt's statistic puts the one change in level of ``v``: the number of
    values before it (``v[:k]`` one level, ``v[k:]`` the other)."""
    u = _split_sums(average_ranks(np.asarray(v, dtype=np.float64)) + 1.0)
    return int(np.argmax(np.abs(u))) + 1


def _split_sums(r: Floats) -> Floats:
    """Pettitt's Uₜ = 2·Σᵢ≤ₜ rᵢ − t(n + 1) for t = 1 … n − 1, over the last axis of the
    ranks ``r`` (one series, or many shuffles of it)."""
    n = r.shape[-1]
    t = np.arange(1, n, dtype=np.float64)
    u: Floats = 2.0 * np.cumsum(r, axis=-1)[..., :-1] - t * (n + 1)
    return u


def _inflation(v: Floats, *, rising: bool) -> float:
    """The autocorrelation inflation of ``v`` about its isotonic fit in the direction
    of its trend (see the module docstring)."""
    if len(v) < AUTOCORRELATION_MIN_POINTS:
        return 1.0
    residuals = v - isotonic(v, increasing=rising)
    # An exact fit leaves rounding dust, whose "autocorrelation" means nothing.
    if np.ptp(residuals) <= 1e-9 * max(float(np.ptp(v)), 1e-300):
        return 1.0
    return autocorrelation_inflation(residuals)
