"""Seeded open-loop arrival schedules: the intended send offsets of an issue window.

An open-loop load sends each request at a time fixed in advance, whatever the server does
(unlike the closed loop, where a worker's next request waits for its last). The schedule
is an iterator of offsets in seconds from the window's start, drawn from numpy's
``Generator`` seeded by ``--arrival-seed`` so a run's schedule is reproducible:

- ``constant``: one request every ``1/rate`` seconds (CV 0);
- ``poisson``: exponential gaps of mean ``1/rate`` (CV 1);
- ``gamma``: gamma gaps with coefficient of variation ``burstiness`` — shape
  ``k = 1/CV²``, scale ``1/(rate·k)`` (mean ``1/rate``; CV 1 is Poisson, above 1 bursty),
  as in vLLM's benchmark ``--burstiness``.

The first arrival is at offset 0 (the window opens with a request). Gaps are drawn in
blocks of :data:`BLOCK` and handed out as Python floats: one numpy call per block, not
per request, so the scheduler's cost per arrival is a list step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

ArrivalModel = Literal["constant", "poisson", "gamma"]
ARRIVAL_MODELS: tuple[ArrivalModel, ...] = ("constant", "poisson", "gamma")
BLOCK = 4096
"""Gaps drawn per numpy call: large enough that the draw is noise per request, small
enough that a short run does not draw far past its end."""


def gap_block(
    model: ArrivalModel, rate: float, burstiness: float | None, rng: np.random.Generator, n: int
) -> np.ndarray:
    """``n`` inter-arrival gaps in seconds, mean ``1/rate``, for ``model``."""
    mean = 1.0 / rate
    if model == "constant":
        return np.full(n, mean)
    if model == "poisson":
        return rng.exponential(mean, n)
    if burstiness is None:
        raise ValueError("the gamma model needs a burstiness (its coefficient of variation)")
    shape = 1.0 / (burstiness * burstiness)
    return rng.gamma(shape, mean / shape, n)


def arrival_offsets(
    model: ArrivalModel, rate: float, burstiness: float | None = None, seed: int = 0
) -> Iterator[float]:
    """The intended send offsets (seconds from the window's start), unbounded: the caller
    stops at its window's end or request count."""
    if not (rate > 0 and math.isfinite(rate)):  # an infinite rate: every offset 0, a spin
        raise ValueError(f"rate must be above 0 requests/s and finite, not {rate!r}")
    if (
        model == "gamma"
        and burstiness is not None
        and not (burstiness > 0 and math.isfinite(burstiness))
    ):
        raise ValueError(f"burstiness must be a finite number above 0, not {burstiness!r}")
    rng = np.random.default_rng(seed)
    at = 0.0
    while True:
        gaps = gap_block(model, rate, burstiness, rng, BLOCK)
        # Offsets of this block: the carried start, then the running sum of all but the
        # last gap; the last gap carries over to the next block.
        offsets = np.empty(BLOCK)
        offsets[0] = at
        np.cumsum(gaps[:-1], out=offsets[1:])
        offsets[1:] += at
        at = float(offsets[-1] + gaps[-1])
        yield from offsets.tolist()


# -- a rate that follows a curve ---------------------------------------------------------------


def _finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def _check_point(i: int, t: float, rate: float, prev_t: float) -> None:
    if not _finite(t) or t < 0:
        raise ValueError(f"RateCurve point {i}: time {t!r} s must be a finite number >= 0")
    if t < prev_t:
        raise ValueError(
            f"RateCurve point {i}: time {t!r} s comes before the previous point's "
            f"{prev_t!r} s (times must be ascending)"
        )
    if not _finite(rate) or rate < 0:
        raise ValueError(
            f"RateCurve point {i}: rate {rate!r} requests/s must be a finite number >= 0"
        )


class RateCurve:
    """A piecewise-linear target rate r(t), requests/s, over seconds from the window's start.

    ``points`` are ``(t, rate)`` with ``t`` ascending (two points at one ``t`` make a
    step); the rate is linear between points, the first point's before it and the last
    point's after it. Arrivals follow it by time-rescaling: the k-th arrival of a schedule
    whose expected count Λ(t) = ∫₀ᵗ r is drawn from unit-rate gaps goes out when Λ reaches
    its target (:meth:`time_at`), so a ramp gets the right count in every sub-interval and
    a stretch at rate 0 gets none.

    The draws are made at :attr:`reference_rate` (the first point's rate, else 1), fixed
    for the curve's life: while the curve has held that rate since 0 the send times are
    the draws themselves (:meth:`time_of`), so a constant curve's schedule is, float for
    float, :func:`arrival_offsets`' at that rate, and a live change leaves every arrival
    before it as it was.
    """

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        if not points:
            raise ValueError("RateCurve needs at least one (t, rate) point")
        prev_t = 0.0
        for i, (t, rate) in enumerate(points):
            _check_point(i, float(t), float(rate), prev_t)
            prev_t = float(t)
        first_rate = float(points[0][1])
        self.reference_rate = first_rate if first_rate > 0 else 1.0
        """The rate the schedule's draws are made at (:func:`curve_draws`)."""
        self._set_points([(float(t), float(r)) for t, r in points])

    def _set_points(self, points: list[tuple[float, float]]) -> None:
        if points[0][0] > 0:  # the first point's rate holds from the window's start
            points.insert(0, (0.0, points[0][1]))
        self._t = [t for t, _ in points]
        self._r = [r for _, r in points]
        # Λ at each point: the trapezoids of the segments before it.
        self._cum = [0.0]
        for i in range(1, len(points)):
            width = self._t[i] - self._t[i - 1]
            self._cum.append(self._cum[-1] + 0.5 * (self._r[i - 1] + self._r[i]) * width)
        # Where the reference rate stops holding: the last of the points from t 0 on that
        # are all at it (the rate leaves it right after), math.inf when every point is.
        self._lead_end = 0.0
        for t, r in zip(self._t, self._r, strict=True):
            if r != self.reference_rate:
                break
            self._lead_end = t
        else:
            self._lead_end = math.inf

    @property
    def points(self) -> list[tuple[float, float]]:
        """The curve's points as they are now (from t 0, after every change)."""
        return list(zip(self._t, self._r, strict=True))

    def rate_at(self, t: float) -> float:
        """r(t); at a step (two points at one ``t``) the rate after it."""
        i = bisect.bisect_right(self._t, t) - 1
        if i < 0:
            return self._r[0]
        if i == len(self._t) - 1:
            return self._r[i]
        t0, t1 = self._t[i], self._t[i + 1]
        return self._r[i] + (self._r[i + 1] - self._r[i]) * (t - t0) / (t1 - t0)

    def set_from(self, t: float, rate: float) -> None:
        """A live change: drop every point after ``t``, hold ``rate`` from ``t`` on (the
        curve up to ``t`` is kept, so Λ(t) is unchanged)."""
        if not _finite(t):
            raise ValueError(f"RateCurve.set_from: time {t!r} s must be a finite number")
        if not _finite(rate) or rate < 0:
            raise ValueError(
                f"RateCurve.set_from: rate {rate!r} requests/s must be a finite number >= 0"
            )
        if t <= 0:
            self._set_points([(0.0, float(rate))])
            return
        kept = [(pt, r) for pt, r in zip(self._t, self._r, strict=True) if pt < t]
        self._set_points([*kept, (float(t), self.rate_at(t)), (float(t), float(rate))])

    def cumulative(self, t: float) -> float:
        """Λ(t) = ∫₀ᵗ r: the expected arrivals by ``t`` seconds."""
        if t <= 0:
            return 0.0
        i = bisect.bisect_right(self._t, t) - 1
        x = t - self._t[i]
        if i == len(self._t) - 1:
            return self._cum[i] + self._r[i] * x
        slope = (self._r[i + 1] - self._r[i]) / (self._t[i + 1] - self._t[i])
        return self._cum[i] + self._r[i] * x + 0.5 * slope * x * x

    def time_at(self, lam: float) -> float:
        """Λ's inverse: the first time Λ exceeds ``lam`` (right-continuous, so an arrival
        whose target is reached as a stretch at rate 0 begins goes out when it ends);
        ``math.inf`` when the rate stays 0 for ever after."""
        if lam < 0:
            return 0.0
        i = bisect.bisect_right(self._cum, lam) - 1
        d = lam - self._cum[i]
        t0, r0 = self._t[i], self._r[i]
        if i == len(self._t) - 1:  # the tail: the last rate for ever
            return math.inf if r0 == 0 else t0 + d / r0
        if d == 0:  # Λ grows right after t0 (a segment of no area was stepped over)
            return t0
        t1 = self._t[i + 1]
        slope = (self._r[i + 1] - r0) / (t1 - t0)
        # r0·x + slope·x²/2 = d, in the form that keeps its digits as slope → 0 (and is
        # d/r0 at slope 0; r0 and slope are not both 0 in a segment with area).
        x = 2 * d / (r0 + math.sqrt(max(0.0, r0 * r0 + 2 * slope * d)))
        return min(t0 + x, t1)

    def time_of(self, draw: float) -> float:
        """The send time of the arrival drawn at ``draw`` seconds by :func:`curve_draws`:
        ``draw`` itself while the reference rate has held since 0, else
        ``time_at(reference_rate × draw)``."""
        if draw < self._lead_end:
            return draw
        return self.time_at(self.reference_rate * draw)


def curve_draws(
    model: ArrivalModel, curve: RateCurve, burstiness: float | None = None, seed: int = 0
) -> Iterator[float]:
    """The schedule's draws for ``curve`` (seconds at its reference rate): what
    :class:`loadgen.open_loop.OpenLoopGenerator` takes as ``offsets`` with a curve."""
    return arrival_offsets(model, curve.reference_rate, burstiness, seed)


def curve_offsets(
    model: ArrivalModel, curve: RateCurve, burstiness: float | None = None, seed: int = 0
) -> Iterator[float]:
    """The intended send offsets of ``model``'s seeded schedule under ``curve`` (seconds
    from the window's start, ascending); ends where the rate stays 0 for ever. Pure: a
    record's steps rebuild the curve after the run and this redraws what was offered.
    A constant curve gives :func:`arrival_offsets`' offsets exactly."""
    for draw in curve_draws(model, curve, burstiness, seed):
        at = curve.time_of(draw)
        if at == math.inf:
            return
        yield at
