"""Where a change began, and the monotone fit the trend test measures noise against.

- **Change point**: the onset of a change, as the best weighted least-squares fit of two
  shapes over every candidate point: a *hinge* (flat, then linear from the knot; a knot
  at the first point is a straight line) and a *step* (one level, then another); a
  straight line unless a placed change pays for itself by BIC. Positive series are fit
  with weights 1/level² (noise in proportion to the level: :func:`relative_weights`).
  The judge fits a throughput as its reciprocal (time per token, which is what a slowing
  engine adds to, so a decay as 1/(1 + kt) is a hinge there: ``soak.judge.trend``).
- **Isotonic fit** (pool adjacent violators): the closest monotone curve, whose
  residuals the trend test's autocorrelation correction reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]

CHANGE_PENALTY = 1.5
"""BIC's price of a placed change, in units of ln n (see :func:`change_point`)."""


@dataclass(frozen=True)
class ChangePoint:
    """Where a change began: ``onset`` in the series' time unit, and the shape that fit."""

    onset: float
    shape: Literal["hinge", "step"]
    index: int
    """The first point of the changed part (the knot, or the first after the step)."""


def change_point(t: Floats, y: Floats, w: Floats | None = None) -> ChangePoint | None:
    """The onset of the change in ``y``: the best (weighted) least-squares hinge or step
    over every candidate point (None under 4 points). A hinge's onset is its knot, placed
    between the points around the best one (:func:`_refined_knot`); a step's is halfway
    between the last point before it and the first after. A straight line (a knot at the
    first point: monotone from the start) wins unless the better fit pays for its placed
    change, by BIC: n·ln(SSE_line / SSE) > :data:`CHANGE_PENALTY`·ln n."""
    fit = _change_fit(t, y, w)
    return None if fit is None else fit[0]


def _change_fit(t: Floats, y: Floats, w: Floats | None) -> tuple[ChangePoint, float] | None:
    """:func:`change_point` and the weighted squared error of the shape it chose."""
    n = len(t)
    if n < 4:
        return None
    w = np.ones(n) if w is None else w
    hinge_k, hinge_sse, line_sse = _best_hinge(t, y, w)
    knot, knot_sse = _refined_knot(t, y, w, hinge_k)
    hinge_sse = min(hinge_sse, knot_sse)
    step_k, step_sse = _best_step(y, w)
    best_sse = min(hinge_sse, step_sse)
    yc = y - float(np.dot(w, y)) / float(w.sum())
    tiny = 1e-12 * max(float(np.dot(w, yc * yc)), 1e-300)
    if n * math.log((line_sse + tiny) / (best_sse + tiny)) <= CHANGE_PENALTY * math.log(n):
        return ChangePoint(onset=float(t[0]), shape="hinge", index=0), line_sse
    if step_sse < hinge_sse:
        step_k = _first_moved(y, step_k)
        mid = float((t[step_k - 1] + t[step_k]) / 2.0)
        return ChangePoint(onset=mid, shape="step", index=step_k), step_sse
    index = int(np.searchsorted(t, knot))
    return ChangePoint(onset=knot, shape="hinge", index=index), hinge_sse


def relative_weights(t: Floats, y: Floats) -> Floats | None:
    """Weights 1/level² from a first, unweighted change-point fit, for a positive
    series: latencies and rates are noisy in proportion to their level, and unweighted
    least squares would let the loudest windows (a TTFT at 15 s against 0.5 s) place
    the change alone. None for a series that is not positive."""
    if len(y) < 4 or not bool(np.all(y > 0)):
        return None
    level = y - residuals(t, y, change_point(t, y))
    floor = 1e-3 * float(np.median(y))
    weights: Floats = 1.0 / np.maximum(level, floor) ** 2
    return weights


def _hinge_sse(t: Floats, y: Floats, w: Floats, knots: Floats) -> Floats:
    """The weighted squared error of the flat-then-linear fit at each of ``knots``."""
    total = float(w.sum())
    x = np.maximum(0.0, t[None, :] - knots[:, None])
    xc = x - ((x @ w) / total)[:, None]
    yc = y - float(np.dot(w, y)) / total
    sxx = (xc * xc) @ w
    sxy = xc @ (w * yc)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(sxx > 0, sxy * sxy / sxx, 0.0)
    # Cancellation can leave a hair below zero on an exact fit.
    sse: Floats = np.maximum(float(np.dot(w, yc * yc)) - explained, 0.0)
    return sse


def _best_hinge(t: Floats, y: Floats, w: Floats) -> tuple[int, float, float]:
    """The knot (index) whose flat-then-linear fit leaves the least weighted squared
    error, that error, and the straight line's (the knot at the first point); the knot
    leaves at least two points after it."""
    sse = _hinge_sse(t, y, w, t[: len(t) - 2])
    k = int(np.argmin(sse))
    return k, float(sse[k]), float(sse[0])


KNOT_STEPS = 8
"""Candidate knots between two points, when the best point-knot is refined."""


def _refined_knot(t: Floats, y: Floats, w: Floats, k: int) -> tuple[float, float]:
    """The best knot between the points either side of point ``k`` and its error: a
    change begins between windows as often as at one's middle, and a knot at a point
    puts a ramp that began just after it a whole window early."""
    lo = t[max(k - 1, 0)]
    hi = t[min(k + 1, len(t) - 3)]
    knots = np.linspace(lo, hi, 2 * KNOT_STEPS + 1)
    sse = _hinge_sse(t, y, w, knots)
    best = int(np.argmin(sse))
    return float(knots[best]), float(sse[best])


MOVED_SHARE = 0.25
"""A point before a step that already went this share of the way to the second level is
part of it: a step in answers counted when they end shows first in a window half-moved
(requests sent before the onset end normally), and that window is when it began."""


def _first_moved(y: Floats, k: int) -> int:
    """The step's first index, moved back over the points just before it that had already
    gone :data:`MOVED_SHARE` of the way from the first level to the second."""
    before, after = float(np.mean(y[:k])), float(np.mean(y[k:]))
    gap = after - before
    while k > 1 and gap and (float(y[k - 1]) - before) / gap >= MOVED_SHARE:
        k -= 1
    return k


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


def residuals(t: Floats, y: Floats, cp: ChangePoint | None) -> Floats:
    """``y`` less its best change-point fit (a straight line without one)."""
    if cp is None:
        return _line_residuals(t, y)
    if cp.shape == "step":
        fit: Floats = np.where(
            np.arange(len(y)) < cp.index, y[: cp.index].mean(), y[cp.index :].mean()
        )
        return y - fit
    return _line_residuals(np.maximum(0.0, t - cp.onset), y)


def isotonic(y: Floats, *, increasing: bool = True) -> Floats:
    """The least-squares monotone (non-decreasing, or non-increasing) fit of ``y``: pool
    adjacent violators, linear in the points."""
    values = y if increasing else -y
    means: list[float] = []
    sizes: list[int] = []
    for v in values.tolist():
        mean, size = v, 1
        # Pool with the block before while it sits above: the fit may not fall.
        while means and means[-1] > mean:
            prev, count = means.pop(), sizes.pop()
            mean = (prev * count + mean * size) / (count + size)
            size += count
        means.append(mean)
        sizes.append(size)
    fit: Floats = np.repeat(np.array(means, dtype=np.float64), sizes)
    return fit if increasing else -fit
