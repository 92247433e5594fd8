"""Service-level objectives, goodput and a sweep's knee (issue 16 §4).

``--slo "ttft<2s,tpot<50ms"`` names, per request, the latencies a user would accept:
``ttft``, ``tpot``, ``e2e`` and ``itl``, each ``<`` or ``<=`` a duration in the threshold
grammar (``ms``, ``s``, ``m``, ``h``; a bare number is seconds). A request is *good* when
it completed and meets every objective; **goodput** is good requests ÷ the step's judged
span, in requests/s, as vLLM's benchmark ``--goodput`` counts it (there over the whole
benchmark; here per load step, after its settle time). Per request:

- ``ttft`` and ``e2e``: the request's own, from its send — in an open loop from its
  *intended* send (lateness included, as the schedule-relative figures are): a request the
  client or the cap held back was not served within its objective to the user who
  arrived then (coordinated omission);
- ``tpot``: (e2e − ttft) ÷ (output tokens − 1); a request of one token has none and meets it;
- ``itl``: its largest gap between content chunks (every gap must meet the bound).

Without an SLO every completed request is good: goodput is the completed throughput.

**The knee** of a sweep (its steps in ascending order of target) is where goodput stops
rising for good: the first step that no later step's goodput exceeds by more than
:data:`KNEE_RISE` (5 %). A dip followed by a real rise is not a knee (one noisy step must
not end the curve early); a sweep whose last step still rose has no knee (``None``: the
sweep did not reach it). The rule is stated in the record (:data:`KNEE_RULE`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from soak.judge.limits import percentile_method
from soak.record.models import LoadStep, SweepResult
from soak.record.step_figures import StepCounts, step_figures
from soak.record.summary import LoadTiming

SloMetric = Literal["ttft", "tpot", "e2e", "itl"]
SLO_METRICS: tuple[SloMetric, ...] = ("ttft", "tpot", "e2e", "itl")
KNEE_RISE = 0.05
"""A step's goodput must exceed the previous one's by more than this share to count as a
rise: a sweep's steps are short, and a few percent is what chance alone moves them."""
KNEE_RULE = (
    "where goodput stops rising for good: the first step that no later step's goodput "
    f"exceeds by more than {KNEE_RISE:.0%} (none: goodput still rose at the last step)"
)
MAX_SLO_ITEMS = 8

_UNITS = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_ITEM = re.compile(
    r"^\s*([a-z0-9]+)\s*(<=|<)\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-z]*)\s*$"
)
_OPS: dict[str, Callable[[float, float], bool]] = {"<": operator.lt, "<=": operator.le}


class SloError(ValueError):
    """An SLO that cannot be parsed; ``str()`` names the item and what is allowed."""


@dataclass(frozen=True)
class Slo:
    """One objective: ``metric op bound_s``."""

    metric: SloMetric
    op: Literal["<", "<="]
    bound_s: float

    @property
    def text(self) -> str:
        """The objective in canonical words, e.g. ``ttft<2s`` or ``tpot<=0.05s``."""
        return f"{self.metric}{self.op}{self.bound_s:g}s"


def parse_slo(text: str) -> list[Slo]:
    """``ttft<2s,tpot<50ms`` → its objectives; :class:`SloError` naming the bad item."""
    allowed = (
        "comma-separated METRIC<DURATION or METRIC<=DURATION, METRIC one of "
        f"{', '.join(SLO_METRICS)}, DURATION a number with ms, s, m or h (e.g. ttft<2s,tpot<50ms)"
    )
    items = [s for s in text.split(",") if s.strip()]
    if not items:
        raise SloError(f"slo {text[:60]!r} holds no objective ({allowed})")
    if len(items) > MAX_SLO_ITEMS:
        raise SloError(f"slo: {len(items)} objectives, at most {MAX_SLO_ITEMS}")
    out: list[Slo] = []
    for item in items:
        m = _ITEM.match(item)
        if m is None or m.group(4) not in _UNITS:
            raise SloError(f"slo item {item.strip()[:40]!r} is not an objective ({allowed})")
        metric, op, number, unit = m.groups()
        if metric not in SLO_METRICS:
            raise SloError(
                f"slo item {item.strip()[:40]!r}: {metric!r} is not a per-request latency "
                f"(allowed: {', '.join(SLO_METRICS)})"
            )
        bound = float(number) * _UNITS[unit]
        if not (math.isfinite(bound) and bound > 0):
            raise SloError(f"slo item {item.strip()[:40]!r}: the bound must be above 0")
        if any(s.metric == metric for s in out):
            raise SloError(f"slo names {metric} twice ({text[:60]!r}): give each metric once")
        out.append(Slo(metric, "<" if op == "<" else "<=", bound))
    return out


def request_meets(line: dict[str, Any], slos: Sequence[Slo]) -> bool:
    """A journal line completed and meets every objective (see the module docstring)."""
    if not line.get("ok") or line.get("cancelled"):
        return False
    for slo in slos:
        value = _value(line, slo.metric)
        if value is not None and not _OPS[slo.op](value, slo.bound_s):
            return False
    return True


def _value(line: dict[str, Any], metric: SloMetric) -> float | None:
    """The request's own figure for ``metric`` (None: it has none, e.g. a 1-token tpot)."""
    ttft, e2e = line.get("ttft_s"), line.get("e2e_s")
    intended = line.get("intended_s")
    late = 0.0 if intended is None else max(0.0, float(line["sent_s"]) - float(intended))
    if metric == "ttft":  # completed without a token: it never met a first-token bound
        return float(ttft) + late if ttft is not None else math.inf
    if metric == "e2e":
        return float(e2e) + late if e2e is not None else math.inf
    if metric == "tpot":
        ot = line.get("output_tokens")
        if ttft is None or e2e is None or not ot or ot <= 1:
            return None
        return (float(e2e) - float(ttft)) / (int(ot) - 1)
    gaps = line.get("itl_us")
    return max(gaps) / 1e6 if gaps else None


def knee(goodputs: Sequence[float | None]) -> int | None:
    """The knee's position in ``goodputs`` (a sweep's steps in order), by :data:`KNEE_RULE`;
    None when goodput still rose at the last step, or a step has no goodput to compare."""
    if any(g is None for g in goodputs):
        return None
    values = [float(g) for g in goodputs if g is not None]
    for i in range(len(values) - 1):
        if max(values[i + 1 :]) <= values[i] * (1 + KNEE_RISE):
            return i
    return None


def measured_steps(
    requests_path: Path,
    steps: Sequence[LoadStep],
    whole: LoadTiming,
    config: Mapping[str, Any],
    counts: Sequence[StepCounts],
) -> tuple[list[LoadStep], SweepResult | None]:
    """The record's ``steps`` (each with its figures and goodput under the config's
    ``slo``) and ``sweep`` (its knee; None unless the config has a sweep): the one path
    finalize, verify and recover take (in the same read as the rest of the record's
    figures: :mod:`soak.judge.load_pass`)."""
    method = percentile_method(config)
    done = step_figures(requests_path, steps, whole, method, counts, good_line(config))
    return done, sweep_of(done, config)


def good_line(config: Mapping[str, Any]) -> Callable[[dict[str, Any]], bool]:
    """Whether a journal line is a good request under the config's ``slo``."""
    slos = _config_slos(config)
    return lambda line: request_meets(line, slos)


def sweep_of(done: Sequence[LoadStep], config: Mapping[str, Any]) -> SweepResult | None:
    """The sweep's knee among the measured steps ``done`` (None unless the config has a
    sweep)."""
    sweep = config.get("sweep")
    if not isinstance(sweep, str) or not sweep:
        return None
    kind: Literal["rate", "concurrency"] = (
        "rate" if sweep.partition("=")[0].strip() == "rate" else "concurrency"
    )
    swept = [s for s in done if s.origin == "sweep"]
    at = knee([s.goodput for s in swept])
    return SweepResult(
        kind=kind,
        slo=[s.text for s in _config_slos(config)],
        knee_step=None if at is None else swept[at].index,
        rule=KNEE_RULE,
    )


def _config_slos(config: Mapping[str, Any]) -> list[Slo]:
    slo_text = config.get("slo")
    return parse_slo(slo_text) if isinstance(slo_text, str) and slo_text else []
