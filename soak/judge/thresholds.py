"""k6-style thresholds: pass/fail conditions on run metrics (``--threshold EXPR``, repeatable).

An expression is ``METRIC OP VALUE[UNIT][,abort][,grace=DURATION]``, for example
``ttft.p99<2s``, ``error_rate<0.1%``, ``output_tokens_per_s>1000`` or
``e2e.p99<20s,abort,grace=60s``. The condition is what must hold: ``ttft.p99<2s`` is
breached when the p99 TTFT is 2 s or more.

Thresholds are checked twice, against two kinds of figures that are never mixed up:

- live, once a second, from the snapshot's cumulative view (1 % histogram buckets; a
  mix's ``class.<name>.*`` from that class's live tally, :mod:`soak.judge.class_thresholds`):
  a ``ThresholdWatch`` remembers when each one was first breached, and an ``abort``
  threshold stops the load once it is breached and its grace has passed (k6's
  ``abortOnFail`` / ``delayAbortEval``);
- at the end, from the record's exact figures: that decides the verdict.

A metric without a value is ``no_data``, never ok: a threshold nobody could check makes
the run INVALID, not PASSED. So what is known up front never to be checkable is refused
when parsed instead: ``,abort`` on a metric without a live figure (``ttfb.*``,
``first_content.*`` and ``engine.preemptions`` are checked only at the end, against the
record), and ``gpu.*`` thresholds when the run has no GPU telemetry source (``--dcgm``).

Drift and leak thresholds judge the soak on its timeline (``soak.judge.endurance``):
``drift.<figure> OP ±N%`` bounds a figure's change from the baseline windows to the end
(``drift.output_tok_s>-10%``, ``drift.ttft.p99<+50%``; ratio figures in points:
``drift.error_rate<+1%``), ``leak.<resource> OP N<unit>/h`` its growth per hour
(``leak.server_rss<200MB/h``, ``leak.gpu_mem<1GiB/h``, ``leak.kv_usage<10%/h``,
``leak.open_files<100/h``). One is breached only when its condition fails *and* the
trend behind the figure is significant (:mod:`soak.judge.trend_metrics`); otherwise it is
ok and its ``source`` says what the trend was. ``,abort`` acts on the live window series
once a trend can be judged.

``,note`` makes a threshold note-tier: its breach (or its lack of data) is a note in the
verdict, never a failure (the default soak policy's gentler items, ``soak.judge.soak_policy``).

The metrics a threshold can name and their figures are in
:mod:`soak.judge.threshold_metrics`; a state's model is the record's
(:class:`soak.record.sections.ThresholdState`), the same live in each snapshot.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict

from soak.judge.class_thresholds import CLASS_PREFIX, class_metric_info
from soak.judge.threshold_metrics import (
    EXAMPLES,
    LATENCIES,
    METRICS,
    NO_GPU_TELEMETRY,
    OTHER_METRICS,
    STATS,
    TREND_METRICS,
    UNIT_HINTS,
    UNITS,
    Figure,
    MetricInfo,
    describe_metrics,
    describe_trend_metrics,
    format_duration,
    format_value,
    metrics_from_record,
    metrics_from_snapshot,
    record_source,
    why_no_data,
)
from soak.judge.trend_metrics import TrendFigure
from soak.record.endurance import FIGURES, LEAKS
from soak.record.models import Reason
from soak.record.sections import ThresholdState

__all__ = [
    "LIVE_SOURCE",
    "METRICS",
    "OPS",
    "TREND_METRICS",
    "MetricInfo",
    "Threshold",
    "ThresholdError",
    "ThresholdState",
    "ThresholdWatch",
    "breached_live_reason",
    "describe_metrics",
    "describe_trend_metrics",
    "evaluate",
    "format_duration",
    "format_value",
    "is_note",
    "metrics_from_record",
    "metrics_from_snapshot",
    "parse_threshold",
    "parse_thresholds",
    "record_source",
    "threshold_reasons",
]

Op = Literal["<", "<=", ">", ">=", "==", "!="]

LIVE_SOURCE = "live histogram (1 % buckets)"
"""The ``source`` of states evaluated from a snapshot."""

OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12),
    "!=": lambda a, b: not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12),
}
"""``==``/``!=`` compare with a relative tolerance of 1e-9 so unit conversions
(``50ms`` vs 0.05 s) do not make equal values differ."""


class ThresholdError(ValueError):
    """An expression that cannot be parsed; ``str()`` is the operator's message."""


_DURATION_UNITS = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

_NUMBER = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S*)$")
_METRIC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*")  # "-": in a class's name


class Threshold(BaseModel):
    """One parsed threshold; ``value`` is in canonical units (seconds, fractions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expr: str
    """The expression as given."""
    condition: str
    """The comparison as written, without spaces or options, e.g. ``e2e.p99<20s``."""
    metric: str
    op: Op
    value: float
    abort_on_fail: bool = False
    grace_s: float = 0.0
    """With ``abort``: load seconds before a breach may stop the load."""
    note: bool = False
    """``,note``: a breach (or no data) is a note in the verdict, never a failure."""
    origin: Literal["given", "default"] = "given"
    """``default``: an item of the default soak policy, applied only where it can be
    checked (``soak.judge.soak_policy``)."""


# --- parsing -------------------------------------------------------------------------


def parse_threshold(
    text: str, *, gpu_telemetry: bool = False, classes: Sequence[str] | None = None
) -> Threshold:
    """Parse ``METRIC OP VALUE[UNIT][,abort][,grace=DURATION]``; raise ThresholdError.

    ``gpu_telemetry``: the run has a GPU source, so ``gpu.*`` metrics can have data;
    ``classes``: its mix's class names, for ``class.<name>.*`` (None: any name)."""
    head, *options = text.split(",")
    metric, op, rest = _split_condition(text, head)
    info = _metric_info(text, metric, classes)
    if info.needs_gpu_telemetry and not gpu_telemetry:
        raise _fail(text, NO_GPU_TELEMETRY)
    value = _parse_value(text, info, op, rest)
    abort, grace_s, note = _parse_options(text, options)
    if abort and info.no_live is not None:
        raise _fail(
            text,
            f"{metric} has no live figure ({info.no_live}): it is checked only at the end, "
            "against the record, so ',abort' could never fire; drop ',abort'",
        )
    return Threshold(
        expr=text,
        condition=re.sub(r"\s+", "", head),
        metric=metric,
        op=op,
        value=value,
        abort_on_fail=abort,
        grace_s=grace_s,
        note=note,
    )


def parse_thresholds(
    texts: Sequence[str], *, gpu_telemetry: bool = False, classes: Sequence[str] | None = None
) -> list[Threshold]:
    """Parse several expressions (``--threshold`` given repeatedly); duplicates are errors."""
    out: list[Threshold] = []
    for text in texts:
        t = parse_threshold(text, gpu_telemetry=gpu_telemetry, classes=classes)
        if any(o.condition == t.condition for o in out):
            raise ThresholdError(f"threshold {text!r}: given twice; give each condition once")
        out.append(t)
    return out


def _fail(text: str, why: str) -> ThresholdError:
    return ThresholdError(f"threshold {text!r}: {why}")


def _split_condition(text: str, head: str) -> tuple[str, Op, str]:
    if not head.strip():
        raise _fail(text, "empty expression; write METRIC OP VALUE, e.g. ttft.p99<2s")
    m = _METRIC.match(head)
    if m is None:
        raise _fail(text, f"it must start with a metric name; {_known_metrics()}")
    metric, rest = m.group(1), head[m.end() :]
    op_match = re.match(r"[<>=!]+", rest)
    allowed = ", ".join(OPS)
    if op_match is None:
        raise _fail(text, f"missing comparison after {metric!r}; use one of {allowed}")
    op = op_match.group(0)
    if op not in OPS:
        raise _fail(text, f"unknown operator {op!r}; use one of {allowed}")
    return metric, cast(Op, op), rest[op_match.end() :].strip()


def _known_metrics() -> str:
    others = ", ".join(m.name for m in OTHER_METRICS)
    return (
        f"known metrics: {'|'.join(LATENCIES)}.{{{','.join(STATS)}}}, {others}, "
        "drift.<figure>, leak.<resource>, class.<name>.<load metric> (a --mix class)"
    )


def _metric_info(text: str, metric: str, classes: Sequence[str] | None = None) -> MetricInfo:
    if metric.startswith(CLASS_PREFIX):
        try:
            return class_metric_info(metric, classes)
        except ValueError as e:
            raise _fail(text, str(e)) from None
    if metric in METRICS:
        return METRICS[metric]
    if metric in TREND_METRICS:
        return TREND_METRICS[metric]
    base, _, stat = metric.partition(".")
    if base in ("drift", "leak"):
        raise _fail(text, _unknown_trend(base, stat))
    stats = ", ".join(STATS)
    if base in LATENCIES and not stat:
        raise _fail(text, f"{base!r} needs a statistic, e.g. {base}.p99; use one of {stats}")
    if base in LATENCIES:
        raise _fail(text, f"unknown statistic {stat!r}; use one of {stats}")
    close = difflib.get_close_matches(metric, [*METRICS, *TREND_METRICS], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise _fail(text, f"unknown metric {metric!r}; {hint}{_known_metrics()}")


def _unknown_trend(base: str, name: str) -> str:
    known = list(FIGURES) if base == "drift" else list(LEAKS)
    what = "figure" if base == "drift" else "resource"
    if not name:
        return f"{base!r} needs a {what}, e.g. {base}.{known[0]}; use one of {', '.join(known)}"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean '{base}.{close[0]}'? " if close else ""
    return f"unknown {what} {name!r} after {base}.; {hint}use one of {', '.join(known)}"


def _parse_value(text: str, info: MetricInfo, op: str, raw: str) -> float:
    if not raw:
        example = EXAMPLES.get(info.kind, "10")
        raise _fail(text, f"missing value after {op!r}, e.g. {info.name}{op}{example}")
    m = _NUMBER.match(raw)
    if m is None:
        raise _fail(text, f"value {raw!r} is not a number; {info.name} is {UNIT_HINTS[info.kind]}")
    number, unit = float(m.group(1)), m.group(2)
    factors = UNITS[info.kind]
    if unit not in factors:
        raise _fail(
            text, f"unit {unit!r} does not fit {info.name}, which is {UNIT_HINTS[info.kind]}"
        )
    return number * factors[unit]


def _parse_options(text: str, options: list[str]) -> tuple[bool, float, bool]:
    abort, grace_s, grace_given, note = False, 0.0, False, False
    for raw in (o.strip() for o in options):
        if raw == "abort":
            abort = True
        elif raw == "note":
            note = True
        elif raw.startswith("grace="):
            grace_s, grace_given = _parse_duration(text, raw.removeprefix("grace=").strip()), True
        else:
            raise _fail(
                text,
                f"unknown option {raw!r}; use abort and/or grace=DURATION (e.g. grace=60s), "
                "or note",
            )
    if grace_given and not abort:
        raise _fail(text, "grace only delays an abort; add ',abort' or drop the grace")
    if note and abort:
        raise _fail(text, "a note-tier threshold never stops the load; drop ',note' or ',abort'")
    return abort, grace_s, note


def is_note(expr: str) -> bool:
    """The expression is note-tier (``,note``): its breach is a note, not a failure."""
    return "note" in (o.strip() for o in expr.split(",")[1:])


def _parse_duration(text: str, raw: str) -> float:
    m = _NUMBER.match(raw)
    if m is None or m.group(2) not in _DURATION_UNITS or float(m.group(1)) < 0:
        raise _fail(
            text,
            f"grace {raw!r} is not a duration; use a number ≥ 0 with ms, s, m or h, e.g. grace=60s",
        )
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


# --- evaluation ----------------------------------------------------------------------


def evaluate(
    thresholds: Sequence[Threshold], metrics: Mapping[str, Figure], source: str
) -> list[ThresholdState]:
    """Check each threshold against ``metrics``; a missing or None figure is ``no_data``.
    A trend figure (drift, leak) is breached only when its trend is significant too, and
    names its own source."""
    return [_check(t, metrics.get(t.metric), source) for t in thresholds]


def _check(t: Threshold, observed: Figure, source: str) -> ThresholdState:
    if isinstance(observed, TrendFigure):
        checked = _check(t, observed.observed, observed.source)
        if checked.state == "breached" and not observed.significant:
            return checked.model_copy(update={"state": "ok"})
        return checked
    if observed is None or math.isnan(observed):
        state: Literal["ok", "breached", "no_data"] = "no_data"
        observed = None
    else:
        state = "ok" if OPS[t.op](observed, t.value) else "breached"
    return ThresholdState(
        expr=t.expr,
        condition=t.condition,
        metric=t.metric,
        state=state,
        observed=observed,
        limit=t.value,
        source=source,
    )


class ThresholdWatch:
    """Live checks, once per snapshot: remembers first breaches and decides aborts."""

    def __init__(self, thresholds: Sequence[Threshold], source: str = LIVE_SOURCE) -> None:
        self.thresholds = list(thresholds)
        self.source = source
        self.states: list[ThresholdState] = []
        """The latest states, each with its first live breach (pass to threshold_reasons)."""
        self._first: list[float | None] = [None] * len(self.thresholds)
        self._load_elapsed_s: float | None = None

    def update(
        self, metrics: Mapping[str, Figure], t_s: float, load_elapsed_s: float | None
    ) -> list[ThresholdState]:
        """Check the thresholds now; ``t_s`` is seconds since the run origin and
        ``load_elapsed_s`` seconds since the barrier released (None before the load)."""
        self._load_elapsed_s = load_elapsed_s
        states = evaluate(self.thresholds, metrics, self.source)
        for i, s in enumerate(states):
            if s.state == "breached" and self._first[i] is None:
                self._first[i] = t_s
        self.states = [
            s.model_copy(update={"first_breach_s": f})
            for s, f in zip(states, self._first, strict=True)
        ]
        return self.states

    def abort_due(self) -> Threshold | None:
        """The first ``abort`` threshold breached now whose grace has passed, or None."""
        elapsed = self._load_elapsed_s
        if elapsed is None:
            return None
        for t, s in zip(self.thresholds, self.states, strict=True):
            if t.abort_on_fail and s.state == "breached" and elapsed >= t.grace_s:
                return t
        return None


# --- reasons -------------------------------------------------------------------------


def threshold_reasons(
    final_states: Sequence[ThresholdState],
    live_breaches: Sequence[ThresholdState] = (),
    abort: Threshold | None = None,
) -> list[Reason]:
    """Verdict reasons: a breach FAILS, no data is INVALID, a live-only breach is a note.

    ``final_states`` come from the record; ``live_breaches`` are a ThresholdWatch's
    states (their ``first_breach_s``); ``abort`` is the threshold that stopped the load.
    """
    live = {s.expr: s for s in live_breaches}
    out: list[Reason] = []
    if abort is not None:
        out.append(_abort_reason(abort, live.get(abort.expr)))
    for s in final_states:
        if abort is not None and s.expr == abort.expr:
            continue
        reason = _final_reason(s, live.get(s.expr))
        if reason is not None:
            out.append(reason)
    return out


def _final_reason(s: ThresholdState, live: ThresholdState | None) -> Reason | None:
    first = live.first_breach_s if live is not None else None
    note = is_note(s.expr)
    if s.state == "breached":
        when = f"; first breached live at {format_duration(first)}" if first is not None else ""
        return Reason(
            code="threshold",
            effect="note" if note else "failed",
            message=(
                f"threshold {s.condition} breached: {format_value(s.metric, s.observed)}, "
                f"from the {s.source}{when}"
            ),
        )
    if s.state == "no_data":
        return Reason(
            code="threshold_no_data",
            effect="note" if note else "invalid",
            message=(
                f"threshold {s.condition} could not be checked: {s.metric} had no data "
                f"({why_no_data(s.metric)}); no data is never ok, so the run cannot pass it"
            ),
        )
    return breached_live_reason(s, first)


def breached_live_reason(s: ThresholdState, first: float | None) -> Reason | None:
    """The note for a threshold that held at the end but was first breached live at
    ``first`` (None: it never was)."""
    if first is None:
        return None
    return Reason(
        code="threshold_breached_live",
        effect="note",
        message=(
            f"threshold {s.condition} held at the end ({format_value(s.metric, s.observed)}, "
            f"from the {s.source}) but was first breached live at {format_duration(first)}: "
            "part of the run was worse than the final figure shows"
        ),
    )


def _abort_reason(t: Threshold, live: ThresholdState | None) -> Reason:
    when = ""
    if live is not None and live.first_breach_s is not None:
        when = f" at {format_duration(live.first_breach_s)}"
    seen = ""
    if live is not None and live.observed is not None:
        seen = f" ({format_value(t.metric, live.observed)}, {live.source})"
    grace = f", grace {format_duration(t.grace_s)}" if t.grace_s else ""
    return Reason(
        code="threshold_abort",
        effect="failed",
        message=(
            f"threshold {t.condition} breached{when}{seen}: the load was stopped early "
            f"(abort_on_fail{grace})"
        ),
    )
