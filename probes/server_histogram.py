"""Prometheus histograms as an engine exposes them, and the maths on them.

A :class:`Histogram` is one endpoint's cumulative buckets (summed over its label sets);
:func:`histogram_delta` takes what a window observed from two of them (a count going down
is a counter reset), and :func:`histogram_quantile` estimates a quantile by linear
interpolation inside its bucket, as Prometheus' ``histogram_quantile`` does. Estimates,
labelled ``HISTOGRAM_METHOD``, never the client's exact percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HISTOGRAM_METHOD = "server histogram estimate (bucket interpolation)"


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram as exposed, summed over the label sets of one endpoint."""

    buckets: dict[str, float]
    """Upper bound as exposed (``le``: "0.25", "+Inf") → observations at or below it."""
    sum: float
    count: float


def _bounds(h: Histogram) -> list[tuple[float, float]]:
    """(upper bound, cumulative count), ascending; equal bounds spelled apart are merged."""
    merged: dict[float, float] = {}
    for le, c in h.buckets.items():
        b = float(le)
        merged[b] = merged.get(b, 0.0) + c
    return sorted(merged.items())


def histogram_delta(before: Histogram | None, after: Histogram) -> tuple[Histogram, bool]:
    """What ``after`` observed since ``before``: (delta, reset). A count or bucket that went
    down means the server restarted (counter reset): then ``after`` alone is the delta."""
    if before is None:
        return after, False
    b = dict(_bounds(before))
    a = _bounds(after)
    if after.count < before.count or any(c < b.get(le, 0.0) for le, c in a):
        return after, True
    return (
        Histogram(
            buckets={str(le) if le != math.inf else "+Inf": c - b.get(le, 0.0) for le, c in a},
            sum=after.sum - before.sum,
            count=after.count - before.count,
        ),
        False,
    )


def histogram_quantile(q: float, h: Histogram) -> tuple[float, bool] | None:
    """The ``q``-quantile (0 ≤ q ≤ 1) by linear interpolation inside its bucket, as
    Prometheus' ``histogram_quantile``: (value, capped). ``capped``: it fell in the +Inf
    bucket, and the value is the highest finite bound (a lower bound of the truth). None
    without observations or without a +Inf bucket."""
    bounds = _bounds(h)
    if not bounds or bounds[-1][0] != math.inf or bounds[-1][1] <= 0:
        return None
    rank = q * bounds[-1][1]
    i = next(i for i, (_, c) in enumerate(bounds) if c >= rank)
    if i == len(bounds) - 1:  # the +Inf bucket
        return (bounds[-2][0] if len(bounds) > 1 else math.nan), True
    end, cum = bounds[i]
    if i == 0 and end <= 0:
        return end, False
    start, below = bounds[i - 1] if i > 0 else (0.0, 0.0)
    in_bucket = cum - below
    if in_bucket <= 0:  # q == 0 at an empty leading bucket
        return start, False
    return start + (end - start) * (rank - below) / in_bucket, False


def finite_bounds(h: Histogram) -> list[float]:
    """The histogram's finite upper bounds, ascending (no ``+Inf``)."""
    return [le for le, _ in _bounds(h) if le != math.inf]
