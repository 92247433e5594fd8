"""The load-step options of :class:`soak.run.config.RunConfig`: stages, a sweep, an SLO.

- ``stages`` (``--stages "2m:10rps,10m:40rps,2m:0rps"`` or ``"1m:16,5m:64"``): k6's
  stages. Each ``DURATION:TARGET`` ramps linearly from the previous target to its own over
  its duration; the first ramps from 0, as k6's ramping executors start from 0 (a stage of
  ``0s`` jumps at once: ``"0s:16,5m:16"`` holds 16 from the start). A target in ``rps`` is
  an open-loop rate (``--arrival constant|poisson|gamma`` picks the gaps); a bare whole
  number a closed-loop concurrency (workers parked and woken along the ramp). Units are
  not mixed. The run lasts the sum of the stages.
- ``sweep`` (``--sweep rate=5,10,20,40`` or ``concurrency=4,8,16``): one constant step per
  value, ascending, each ``step_duration_s`` long (``--step-duration``; without it
  ``--duration`` is split evenly), its first ``settle_s`` (``--settle``, default 10 s)
  left out of its figures.
- ``slo`` (``--slo "ttft<2s,tpot<50ms"``): what a good request is, for each step's
  goodput (:mod:`soak.judge.goodput`).

With steps, the issue window, the rate and the concurrency follow from them:
``duration_s`` is their sum, ``rate`` (open loop) their highest target (the default
``--max-in-flight`` is sized from it) and ``concurrency`` (closed loop) their highest
(the workers started behind the barrier). A value given that differs is refused, in words,
never silently overridden; the same value given (``config.json`` read back) passes. A
value equal to the field's default (60 s, 32 workers) cannot be told from none (a layer
such as ``soaktop demo``'s base gives the defaults) and is taken as not given.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from soak.judge.goodput import SloError, parse_slo
from soak.run.config_arrival import MAX_RATE

if TYPE_CHECKING:
    from soak.run.config import RunConfig

StepKind = Literal["rate", "concurrency"]
MAX_STEPS = 256
MAX_CONCURRENCY = 100_000
DEFAULT_SETTLE_S = 10.0
LONGEST_S = 30 * 86_400.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_TARGET = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(rps)?\s*$")
_STAGES_HELP = (
    "comma-separated DURATION:TARGET, e.g. 2m:10rps,10m:40rps (open-loop rates) or "
    "1m:16,5m:64 (closed-loop concurrency); DURATION a number with s, m or h"
)
_SWEEP_HELP = "rate=R1,R2,... or concurrency=N1,N2,..., ascending (e.g. rate=5,10,20,40)"


@dataclass(frozen=True)
class Stage:
    """One ``DURATION:TARGET`` of ``--stages``."""

    duration_s: float
    target: float
    kind: StepKind


@dataclass(frozen=True)
class PlannedStep:
    """One step of the plan, before the run: where it lies in the issue window and its
    target at both ends (equal for a sweep step, a linear ramp between for a stage)."""

    index: int
    origin: Literal["stage", "sweep"]
    label: str
    offset_s: float
    """Seconds from the barrier's release to the step's start."""
    duration_s: float
    kind: StepKind
    start: float
    end: float
    settle_s: float = 0.0

    def target_at(self, t_s: float) -> float:
        """The target ``t_s`` seconds into the step (linear; the end's beyond it)."""
        if self.duration_s <= 0 or t_s >= self.duration_s:
            return self.end
        return self.start + (self.end - self.start) * max(0.0, t_s) / self.duration_s


def _duration(text: str, where: str) -> float:
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{where}: {text.strip()[:20]!r} is not a duration ({_STAGES_HELP})")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_stages(text: str) -> list[Stage]:
    """``2m:10rps,10m:40rps`` → its stages; ``ValueError`` naming the bad item."""
    items = [s for s in text.split(",") if s.strip()]
    if not items:
        raise ValueError(f"stages {text[:40]!r} holds no stage ({_STAGES_HELP})")
    if len(items) > MAX_STEPS:
        raise ValueError(f"stages: {len(items)} stages, at most {MAX_STEPS}")
    out: list[Stage] = []
    for n, item in enumerate(items, 1):
        head, sep, tail = item.partition(":")
        m = _TARGET.match(tail)
        if not sep or m is None:
            raise ValueError(
                f"stage {n} {item.strip()[:30]!r} is not DURATION:TARGET ({_STAGES_HELP})"
            )
        kind: StepKind = "rate" if m.group(2) else "concurrency"
        target = float(m.group(1))
        if kind == "concurrency" and not target.is_integer():
            raise ValueError(
                f"stage {n} {item.strip()!r}: a concurrency is a whole number (a rate ends "
                "in rps, e.g. 2.5rps)"
            )
        top = MAX_RATE if kind == "rate" else MAX_CONCURRENCY
        if target > top:
            raise ValueError(f"stage {n} {item.strip()!r}: the target is at most {top:,.0f}")
        out.append(Stage(_duration(head, f"stage {n}"), target, kind))
    if len({s.kind for s in out}) > 1:
        raise ValueError(
            f"stages {text[:60]!r} mix rates (rps, open loop) and concurrencies (bare "
            "numbers, closed loop): give one kind"
        )
    total = sum(s.duration_s for s in out)
    if not 0 < total <= LONGEST_S:
        raise ValueError(
            f"stages {text[:60]!r}: their durations sum to {total:g} s; allowed: above 0 "
            "up to 30 days"
        )
    if not any(s.target > 0 for s in out):
        raise ValueError(f"stages {text[:60]!r}: every target is 0, nothing would be sent")
    return out


def parse_sweep(text: str) -> tuple[StepKind, list[float]]:
    """``rate=5,10,20`` → (``rate``, its values); ``ValueError`` naming what is wrong."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or name not in ("rate", "concurrency"):
        raise ValueError(f"sweep {text[:40]!r} is not a sweep ({_SWEEP_HELP})")
    kind: StepKind = "rate" if name == "rate" else "concurrency"
    out: list[float] = []
    for item in (s.strip() for s in values.split(",") if s.strip()):
        try:
            v = float(item)
        except ValueError:
            raise ValueError(
                f"sweep {name}: {item[:20]!r} is not a number ({_SWEEP_HELP})"
            ) from None
        top = MAX_RATE if kind == "rate" else MAX_CONCURRENCY
        if not (math.isfinite(v) and 0 < v <= top) or (
            kind == "concurrency" and not v.is_integer()
        ):
            what = "a rate above 0" if kind == "rate" else "a whole number from 1"
            raise ValueError(f"sweep {name}: {item[:20]!r}; allowed: {what} up to {top:,.0f}")
        out.append(v)
    if len(out) < 2 or len(out) > MAX_STEPS:
        raise ValueError(f"sweep {text[:40]!r}: from 2 to {MAX_STEPS} values ({_SWEEP_HELP})")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"sweep {text[:60]!r}: the values must rise (the knee is read in order)")
    return kind, out


def _num(v: float) -> str:
    return f"{v:g}"


def planned_steps(cfg: RunConfig) -> list[PlannedStep]:
    """The run's planned steps (empty without ``stages`` or ``sweep``; ``cfg`` is checked)."""
    out: list[PlannedStep] = []
    if cfg.stages:
        at, before = 0.0, 0.0
        for i, s in enumerate(parse_stages(cfg.stages)):
            if s.duration_s <= 0:  # a jump: the next stage starts from it, no step of no time
                before = s.target
                continue
            unit = " req/s" if s.kind == "rate" else " workers"
            over = f"over {_num(s.duration_s)} s"
            label = f"stage {i + 1}: {_num(before)} → {_num(s.target)}{unit} {over}"
            n = len(out)
            out.append(PlannedStep(n, "stage", label, at, s.duration_s, s.kind, before, s.target))
            at, before = at + s.duration_s, s.target
    elif cfg.sweep:
        kind, values = parse_sweep(cfg.sweep)
        step = cfg.step_duration_s or 0.0
        settle = cfg.settle_s if cfg.settle_s is not None else DEFAULT_SETTLE_S
        for i, v in enumerate(values):
            out.append(
                PlannedStep(i, "sweep", f"{kind}={_num(v)}", i * step, step, kind, v, v, settle)
            )
    return out


def steps_problem(cfg: RunConfig) -> str | None:
    """What is wrong with the step options, in words (None: nothing); a valid plan sets
    ``duration_s``, ``rate``/``concurrency`` and the sweep's step duration and settle."""
    try:
        if cfg.slo is not None:
            parse_slo(cfg.slo)
        if cfg.stages is None and cfg.sweep is None:
            if cfg.settle_s is not None or cfg.step_duration_s is not None:
                return (
                    "settle_s and step_duration_s are for a sweep (--sweep): add one, or drop them"
                )
            return None
        return _plan_problem(cfg)
    except (ValueError, SloError) as e:
        return str(e)


def _plan_problem(cfg: RunConfig) -> str | None:
    if cfg.stages is not None and cfg.sweep is not None:
        return "stages and sweep are exclusive: one plan of steps per run"
    if cfg.matrix is not None:
        return "stages and sweep are for a soak, not a matrix (it has its own cells)"
    if cfg.arrival == "trace":
        what = "stages" if cfg.stages is not None else "sweep"
        return (
            f"{what} with a trace replay (--arrival trace:FILE): the trace's own times set "
            f"the load; drop --{what}, or --arrival"
        )
    if cfg.sweep is not None:
        kind, values = parse_sweep(cfg.sweep)
        if (why := _sweep_timing(cfg, len(values))) is not None:
            return why
        targets, total = values, len(values) * (cfg.step_duration_s or 0.0)
    else:
        stages = parse_stages(cfg.stages or "")
        if cfg.settle_s is not None or cfg.step_duration_s is not None:
            return "settle_s and step_duration_s are for a sweep, not stages: drop them"
        kind, targets = stages[0].kind, [s.target for s in stages]
        total = sum(s.duration_s for s in stages)
    what = "--stages" if cfg.stages else "--sweep"
    if kind == "rate" and cfg.arrival == "closed":
        return (
            f"{what} in requests/s is open loop: add --arrival constant|poisson|gamma (the "
            "gaps' model), or give concurrencies"
        )
    if kind == "concurrency" and cfg.arrival != "closed":
        return (
            f"{what} of concurrencies is closed loop, not arrival = {cfg.arrival!r}: drop --arrival"
        )
    if cfg.sweep is None and _given(cfg, "duration_s") and cfg.duration_s != total:
        return (
            f"duration_s = {cfg.duration_s:g} with stages: the run lasts their sum, "
            f"{total:g} s; drop --duration"
        )
    peak = max(targets)
    if kind == "rate":
        if cfg.rate is not None and cfg.rate != peak:
            return (
                f"rate = {cfg.rate:g} with {what}: the steps set the rate (highest "
                f"{peak:g}); drop --rate"
            )
        cfg.rate = peak
    else:
        if _given(cfg, "concurrency") and cfg.concurrency != int(peak):
            return (
                f"concurrency = {cfg.concurrency} with {what}: the steps set it (highest "
                f"{int(peak)}, the workers started); drop --concurrency"
            )
        cfg.concurrency = int(peak)
    cfg.duration_s = total
    return None


def _given(cfg: RunConfig, name: str) -> bool:
    """``name`` was given a value other than None and its default (see the docstring)."""
    value = getattr(cfg, name)
    default = type(cfg).model_fields[name].default
    return name in cfg.model_fields_set and value is not None and value != default


def _sweep_timing(cfg: RunConfig, n: int) -> str | None:
    """A sweep's step duration and settle: given, or ``duration_s`` split evenly."""
    given_window = _given(cfg, "duration_s")
    if cfg.step_duration_s is None:
        # Without a step length, a window given at the default's value (--duration 60) is
        # the one to split: nothing else could be meant by it.
        if "duration_s" not in cfg.model_fields_set or cfg.duration_s is None:
            return "a sweep needs step_duration_s (--step-duration S) or duration_s (split evenly)"
        cfg.step_duration_s = cfg.duration_s / n
    elif (
        given_window
        and cfg.duration_s is not None
        and not math.isclose(cfg.duration_s, n * cfg.step_duration_s)
    ):
        return (
            f"duration_s = {cfg.duration_s:g} and step_duration_s = {cfg.step_duration_s:g} "
            f"disagree for {n} steps (that is {n * cfg.step_duration_s:g} s): give one"
        )
    if cfg.settle_s is None:
        cfg.settle_s = DEFAULT_SETTLE_S
    if cfg.settle_s >= cfg.step_duration_s:
        return (
            f"settle_s = {cfg.settle_s:g} is not shorter than a step ({cfg.step_duration_s:g} s): "
            "nothing of a step would be measured; lower --settle or lengthen the steps"
        )
    return None
