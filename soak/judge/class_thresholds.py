"""Thresholds on one workload class of a mix: ``class.<name>.<load metric>``.

Every load metric a threshold can name (the latencies' statistics, ``error_rate``,
``failed``, ``completed``, ``output_tokens_per_s``, ``requests_per_s``) can be scoped to
one class of ``--mix``: ``class.json.error_rate==0``, ``class.long.ttft.p99<5s``.

Checked twice, like the load's own thresholds: live, once a second, from the class's
cumulative tally (``LiveLoadStats.class_cumulative``, 1 % histogram buckets:
:func:`class_live_metrics`), so ``class.json.error_rate<1%,abort`` stops the load when
that class breaks; and at the end from the record's ``classes`` (each class's load
summary: :mod:`soak.record.class_figures`), exact like the load's, which decides the
verdict. A class metric has a live figure wherever its base metric has one: ``ttfb.*``
and ``first_content.*`` of a class are end-only and refuse ``,abort``, as the load's do.
A name the run's mix does not have is refused when the thresholds are parsed, naming the
classes it has; a class threshold without a mix likewise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from loadgen.live import ThroughputView
from soak.judge.threshold_metrics import (
    CLASS_PREFIX,
    LATENCIES,
    METRICS,
    STATS,
    Figure,
    MetricInfo,
    class_scope,
    metrics_from_record,
    metrics_from_view,
)
from soak.record.models import WorkloadClassFigures

__all__ = [
    "CLASS_PREFIX",
    "LOAD_METRICS",
    "class_live_metrics",
    "class_metric_info",
    "class_metrics",
    "threshold_classes",
]

LOAD_METRICS: dict[str, MetricInfo] = {n: m for n, m in METRICS.items() if not m.telemetry}
"""The metrics a class can scope: the load's own, not the telemetry's (one server serves
every class)."""


def class_metric_info(metric: str, classes: Sequence[str] | None) -> MetricInfo:
    """The metric ``class.<name>.<load metric>``; raises ``ValueError`` with the words
    when it is not one. ``classes``: the run's mix's class names (empty: no mix; None: not
    known here, as when ``verify`` reads a record back, so any name is taken)."""
    name, base = class_scope(metric)
    if not name or not base:
        raise ValueError(
            f"{metric!r}: a class threshold is class.<name>.<metric>, e.g. class.json.error_rate"
        )
    if classes is not None and not classes:
        raise ValueError(
            f"{metric!r} names workload class {name!r}, but the run has no mix: class "
            "thresholds need --mix FILE"
        )
    if classes is not None and name not in classes:
        raise ValueError(
            f"{metric!r}: the mix has no class {name!r}; its classes: {', '.join(classes)}"
        )
    info = LOAD_METRICS.get(base)
    if info is None:
        others = ", ".join(m.name for m in LOAD_METRICS.values() if m.kind != "latency")
        raise ValueError(
            f"{metric!r}: {base!r} is not a load metric a class can scope; use "
            f"{'|'.join(LATENCIES)}.{{{','.join(STATS)}}} or {others}"
        )
    return replace(
        info,
        name=metric,
        description=f"{info.description}, class {name} only",
    )  # no_live stays the base metric's: the class tally has what the load's view has


def class_metrics(classes: Sequence[WorkloadClassFigures]) -> dict[str, Figure]:
    """Every class's load metrics from the record's ``classes``, by scoped name."""
    out: dict[str, Figure] = {}
    for c in classes:
        figures = metrics_from_record(c.load, {})
        out |= {f"{CLASS_PREFIX}{c.name}.{m}": figures.get(m) for m in LOAD_METRICS}
    return out


def class_live_metrics(views: Mapping[str, ThroughputView]) -> dict[str, Figure]:
    """Every class's live load metrics from its cumulative view
    (``LiveLoadStats.class_cumulative``), by scoped name; those without a live figure
    (``ttfb.*``, ``first_content.*``) are None, and so is every figure of a class with no
    finished request yet: no data, not a count or rate of 0 (a ``failed==0`` not yet ok,
    a rate floor with ``,abort`` not stopping the load before the class's first answer)."""
    out: dict[str, Figure] = {}
    for name, view in views.items():
        figures = metrics_from_view(view)  # no finished request: every figure None
        out |= {f"{CLASS_PREFIX}{name}.{m}": figures.get(m) for m in LOAD_METRICS}
    return out


def threshold_classes(metrics: Iterable[str]) -> tuple[str, ...]:
    """The workload classes the thresholds' metrics name, each once, in their order: the
    only classes whose live views the snapshot tick builds (each view costs its four
    histograms' statistics; 64 classes of a mix cost ~4 ms a tick, on the runner's loop)."""
    names: dict[str, None] = {}
    for metric in metrics:
        name, _ = class_scope(metric)
        if name:
            names[name] = None
    return tuple(names)
