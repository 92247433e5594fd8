"""Words for the endurance judgement: figures in their units, changes, rates, and the
one-line findings people read ("throughput −31% (first 10 min 4,210 tok/s → last 10 min
2,905), monotone since load+00:42")."""

from __future__ import annotations

from soak.judge.threshold_metrics import format_duration
from soak.judge.trend_metrics import DRIFT_FLOOR, LEAK_UNITS, p_value_words, ratio_figure
from soak.record.endurance import FIGURES, LEAKS, DriftFinding, FigureInfo, LeakFinding

MINUS = "−"


def num(v: float) -> str:
    """A figure for people: thousands separated from 1,000, three significant digits
    below."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def pct(fraction: float) -> str:
    """A magnitude in percent (or points), as precise as it is worth: ``31``, ``3.8``,
    ``0.42``."""
    v = abs(fraction) * 100
    if v >= 10:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 1 else f"{v:.2g}"


def signed(v: float, text: str) -> str:
    """``text`` (a magnitude's words) with the sign of ``v``: +, or a true minus."""
    return f"{MINUS if v < 0 else '+'}{text}"


def value_words(info: FigureInfo, v: float, *, unit: bool = True) -> str:
    """One value of a figure: latencies always in ms or s, ratios and percentages in %,
    others with their unit unless ``unit`` is False (the second of a pair)."""
    if info.kind in ("latency", "seconds"):
        return f"{num(v * 1000)} ms" if abs(v) < 1 else f"{num(v)} s"
    if info.kind == "ratio":
        return f"{num(v * 100)}%"
    if info.unit == "%":
        return f"{num(v)}%"
    return f"{num(v)} {info.unit}" if unit and info.unit else num(v)


def change_words(info: FigureInfo, change: float) -> str:
    """``−31%`` (relative) or ``+2.1 points`` (a ratio figure)."""
    if ratio_figure(info):
        return signed(change, f"{pct(change)} points")
    return signed(change, f"{pct(change)}%")


def floor_words(info: FigureInfo) -> str:
    """The kind's materiality floor in words."""
    floor = DRIFT_FLOOR[info.kind] * 100
    return f"{num(floor)} points" if ratio_figure(info) else f"{num(floor)}%"


def p_words(p: float | None, step_p: float | None = None) -> str:
    """``Mann–Kendall p=0.41`` (``p<0.001`` when smaller), and Pettitt's step test's p
    when it was asked (``soak.judge.trend``)."""
    return "no test" if p is None else f"Mann–Kendall {p_value_words(p, step_p)}"


def not_judged_words(n: int, window_s: int, needed: int) -> str:
    """``4 windows of 60 s; a trend needs 8 (8 min)``."""
    windows = "1 window" if n == 1 else f"{n} windows"
    return (
        f"{windows} of {format_duration(window_s)}; a trend needs {needed} "
        f"({format_duration(needed * window_s)})"
    )


def too_few_words(what: str, n: int, needed: int) -> str:
    """A figure with too few windows holding a value."""
    if n == 0:
        return f"{what}: no data in the judged windows"
    return f"{what}: {n} windows with a value; a trend needs {needed}"


def drift_words(f: DriftFinding, span: str, tail: str) -> str:
    """``throughput −31% (first 10 min 4,210 tok/s → last 10 min 2,905)`` + ``tail``."""
    info = FIGURES[f.figure]
    assert f.baseline is not None and f.end is not None
    first = value_words(info, f.baseline)
    last = value_words(info, f.end, unit=False)
    if f.change is not None:
        change = change_words(info, f.change)
    elif f.end == f.baseline:
        change = "unchanged"
    else:
        change = signed(f.end - f.baseline, value_words(info, abs(f.end - f.baseline)))
    return f"{info.words} {change} (first {span} {first} → last {span} {last}){tail}"


def stable_tail(f: DriftFinding, significant: bool) -> str:
    """Why a drift finding is not a drift: no trend, the good way, or too small."""
    p = p_words(f.trend.mk_p, f.trend.step_p)
    if f.trend.direction not in ("rising", "falling"):
        return f": no significant trend ({p})"
    if significant:
        return f": improving ({p})"
    way = 1.0 if f.trend.direction == "rising" else -1.0
    if f.baseline is not None and f.end is not None and (f.end - f.baseline) * way <= 0:
        return f": no consistent trend (the trend and the change disagree; {p})"
    info = FIGURES[f.figure]
    return f": a significant but small trend (under {floor_words(info)}; {p})"


def since_tail(shape: str | None, since: str, event: str | None) -> str:
    """``, monotone since load+00:42`` or ``, a step at load+00:42``, with the moment."""
    lead = f", a step at {since}" if shape == "step" else f", monotone since {since}"
    return lead + (f" (began with: {event})" if event else "")


def resource_value(resource: str, v: float) -> str:
    """A resource's level: ``2,100 MB``, ``45%`` of the KV cache, ``120`` files."""
    if resource == "kv_usage":
        return f"{num(v * 100)}%"
    unit = LEAK_UNITS[resource].removesuffix("/h")
    return f"{num(v)} {unit}" if unit else num(v)


def rate_words(resource: str, rate: float) -> str:
    """``+310 MB/h``, ``+30%/h`` (KV usage points per hour), ``+120/h``."""
    if resource == "kv_usage":
        return signed(rate, f"{pct(rate)}%/h")
    unit = LEAK_UNITS[resource]
    sep = " " if unit != "/h" else ""
    return signed(rate, f"{num(abs(rate))}{sep}{unit}")


def resource_words(resource: str) -> str:
    """The resource's name for people (its figure's words)."""
    return FIGURES[LEAKS[resource]].words


def leak_words(f: LeakFinding, how: str, since: str | None = None) -> str:
    """A leak finding in words; ``how`` is the judge's shape: ``leak``, ``capped``,
    ``returned``, ``levelled``, ``small`` or ``flat``; ``since``: when a leak began."""
    what = resource_words(f.resource)
    assert f.rate_per_h is not None and f.first is not None and f.last is not None
    rate = rate_words(f.resource, f.rate_per_h)
    first, last = resource_value(f.resource, f.first), resource_value(f.resource, f.last)
    peak = resource_value(f.resource, f.peak if f.peak is not None else f.last)
    p = p_words(f.mk_p, f.step_p)
    began = f" since {since}" if since else ""
    if how in ("leak", "capped"):
        lo = rate_words(f.resource, f.rate_lo_per_h or 0.0).split(" ")[0].removesuffix("%/h")
        hi = rate_words(f.resource, f.rate_hi_per_h or 0.0).split(" ")[0].removesuffix("%/h")
        fit = f"{rate} (95% CI {lo} to {hi}, {p})"
        if how == "capped":
            return (
                f"{what} rose from {first} to {last}{began} after a settled start, then "
                f"levelled off: never came back ({fit}, peak {peak})"
            )
        return f"{what} {fit}{began}: {first} → {last}, peak {peak}, never came back"
    if how == "returned":
        return f"{what} rose to {peak} and came back ({last} at the end): not a leak"
    if how == "levelled":
        return (
            f"{what} rose from {first} to {last} as the load began, then levelled off: "
            "a start-up rise, not a leak"
        )
    if how == "small":
        return f"{what} {rate} ({p}): {first} → {last}, too little growth to be a leak"
    return f"{what} {rate}, no significant growth ({p})"


def unsettled_words(f: LeakFinding, span_s: float, settle_s: float) -> str:
    """A rise under way from the first judged windows of a run too short to tell a leak
    from a warm-up."""
    what = resource_words(f.resource)
    assert f.first is not None and f.last is not None
    first, last = resource_value(f.resource, f.first), resource_value(f.resource, f.last)
    return (
        f"{what} rose from {first} to {last} from the start of {span_s / 60:.0f} min of "
        f"judged load: too short to tell a leak from a warm-up (a rise from the start is "
        f"judged over {settle_s / 60:.0f} min or more; --warmup can cover the warm-up)"
    )
