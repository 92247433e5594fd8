"""Prometheus histograms as an engine exposes them, and the maths on them.

A :class:`Histogram` is one endpoint's cumulative buckets (summed over its label sets by
:func:`merge_buckets`); :func:`histogram_delta` takes what a window observed from two of
them (a count going down is a counter reset), and :func:`histogram_estimate` estimates a
quantile by linear interpolation inside its bucket, as Prometheus' ``histogram_quantile``
does. Estimates, labelled ``HISTOGRAM_METHOD``, never the client's exact percentiles.

**Resolution.** An estimate knows only which bucket holds the quantile; where inside it
is an assumption (observations spread evenly). vLLM's request-latency buckets are 0.3,
0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10 s, …: a p50 inside the first bucket [0, 0.3] is 0.15 s
whatever the data (a queue whose mean is 0.019 s reads "0.15"), and a p99 inside (2.5, 5]
can read 4.93 s for a client whose slowest request took 2.9 s. So every estimate carries
the bounds of its bucket (:class:`Estimate`), and :func:`estimate_words` shows it with
them: ``≈ 4.93 s (histogram: 2.5–5 s bucket)``, ``≤ 0.3 s (first bucket)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

HISTOGRAM_METHOD = "server histogram estimate (bucket interpolation)"


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram as exposed, summed over the label sets of one endpoint."""

    buckets: dict[str, float]
    """Upper bound as exposed (``le``: "0.25", "+Inf") → observations at or below it."""
    sum: float
    count: float


@dataclass(frozen=True)
class Estimate:
    """One quantile of a histogram, with the bucket that holds it (its resolution)."""

    value: float
    """The interpolated value; the highest finite bound when ``capped``; NaN when the
    histogram has no finite bound at all."""
    capped: bool
    """It fell in the +Inf bucket: ``value`` is a lower bound of the truth."""
    lower: float
    """The bucket's lower bound: the bound below it, 0 for the first bucket (Prometheus'
    assumption: latencies are not negative)."""
    upper: float | None
    """The bucket's upper bound (``le``); None for the +Inf bucket."""


def _bound(le: str) -> float | None:
    """An ``le`` label as a number (None: not one, so not a bucket soaktop can place)."""
    try:
        b = float(le)
    except ValueError:
        return None
    return None if math.isnan(b) else b


def merge_buckets(series: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Several label sets' cumulative buckets (``le`` → count) as one histogram: summed at
    the bounds *every* set exports. A bound only some sets export (engines of different
    versions, a page cut mid-histogram) would add a partial count and break the
    cumulative order, so it is left out; the estimate gets coarser, not wrong."""
    sets = list(series)
    if len(sets) == 1:  # one engine behind the endpoint (the common case): nothing to align
        return dict(sets[0])
    parsed: list[dict[float, tuple[str, float]]] = []
    for s in sets:
        one: dict[float, tuple[str, float]] = {}
        for le, c in s.items():
            b = _bound(le)
            if b is not None:
                one[b] = (le, one[b][1] + c) if b in one else (le, c)
        parsed.append(one)
    if not parsed:
        return {}
    common = set(parsed[0]).intersection(*parsed[1:])
    return {parsed[0][b][0]: sum(p[b][1] for p in parsed) for b in sorted(common)}


def _bounds(h: Histogram) -> list[tuple[float, float]]:
    """(upper bound, cumulative count), ascending; equal bounds spelled apart are merged,
    and a count below the one before it (a scrape that raced an observation) is raised
    to it, as Prometheus does: cumulative counts never go down."""
    merged: dict[float, float] = {}
    for le, c in h.buckets.items():
        b = _bound(le)
        if b is not None:
            merged[b] = merged.get(b, 0.0) + c
    out: list[tuple[float, float]] = []
    for b, c in sorted(merged.items()):
        out.append((b, max(c, out[-1][1]) if out else c))
    return out


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


def histogram_estimate(q: float, h: Histogram) -> Estimate | None:
    """The ``q``-quantile (0 ≤ q ≤ 1) by linear interpolation inside its bucket, as
    Prometheus' ``histogram_quantile``, with that bucket's bounds. None without
    observations or without a +Inf bucket."""
    bounds = _bounds(h)
    if not bounds or bounds[-1][0] != math.inf or bounds[-1][1] <= 0:
        return None
    rank = q * bounds[-1][1]
    i = next(i for i, (_, c) in enumerate(bounds) if c >= rank)
    if i == len(bounds) - 1:  # the +Inf bucket
        top = bounds[-2][0] if len(bounds) > 1 else math.nan
        return Estimate(top, True, top, None)
    end, cum = bounds[i]
    if i == 0 and end <= 0:
        return Estimate(end, False, end, end)
    start, below = bounds[i - 1] if i > 0 else (0.0, 0.0)
    in_bucket = cum - below
    if in_bucket <= 0:  # q == 0 at an empty leading bucket
        return Estimate(start, False, start, end)
    return Estimate(start + (end - start) * (rank - below) / in_bucket, False, start, end)


def histogram_quantile(q: float, h: Histogram) -> tuple[float, bool] | None:
    """:func:`histogram_estimate` as (value, capped). ``capped``: it fell in the +Inf
    bucket, and the value is the highest finite bound (a lower bound of the truth)."""
    est = histogram_estimate(q, h)
    return None if est is None else (est.value, est.capped)


def finite_bounds(h: Histogram) -> list[float]:
    """The histogram's finite upper bounds, ascending (no ``+Inf``)."""
    return [le for le, _ in _bounds(h) if le != math.inf]


def estimate_words(value: float | None, lower: float | None, upper: float | None) -> str:
    """An estimate as its resolution allows: ``≈ 4.93 s (histogram: 2.5–5 s bucket)``;
    ``≤ 0.3 s (first bucket)`` (its lower bound is 0: where in it the quantile lies is
    not known); ``≥ 7680 s (above the highest bucket)`` (``upper`` None: the +Inf bucket).
    Without bounds (a record older than schema 1.3) the bare value, marked an estimate."""
    if value is None:
        return "—"
    if lower is None:
        return f"≈ {value:.3g} s"
    if upper is None:
        return f"≥ {lower:g} s (above the highest bucket)"
    if lower <= 0:
        return f"≤ {upper:g} s (first bucket)"
    return f"≈ {value:.3g} s (histogram: {lower:g}–{upper:g} s bucket)"
