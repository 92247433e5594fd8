"""The record's timeline: the window series recomputed from the journals, and its judgement.

One function for finalize, ``recover`` and ``verify``: :func:`judged_timeline` cuts the
judged load into windows (:mod:`soak.record.window_journal`; ``recover`` and ``verify``
tally them in their one read of the request journal: :func:`series_tally`) and hands
them to the endurance
judge (:mod:`soak.judge.endurance`) with the policy and the moments a drift may have
begun with, so the three reach the same ``windows`` and ``endurance`` from the same files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loadgen.stats import PercentileMethod
from soak.judge.endurance import judge_endurance
from soak.judge.endurance_verdict import endurance_view
from soak.judge.soak_policy import policy_for, policy_states
from soak.judge.thresholds import Threshold
from soak.record.endurance import Endurance, EnduranceView, WarmupInfo, WindowFigures
from soak.record.events import Event
from soak.record.faults import when
from soak.record.summary import LoadTiming
from soak.record.tally_samples import ItlShare
from soak.record.window_journal import JournalWindows
from soak.record.windows import SeriesSpec, series_origin

MOMENT_KINDS = frozenset({"fault", "restart", "health", "gate"})
"""Event kinds whose errors can name when a drift began (with each failure class's
first failure)."""


WARMUP_OUTLASTED = "the load ended inside the warm-up: nothing was judged"


class Moments:
    """The moments a drift can have begun with, gathered from events as they come."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str]] = []
        self._classes: set[str] = set()

    def add(self, events: Iterable[Event]) -> None:
        """Faults, restarts, /health losses, failed gates or canaries (errors), and the
        first load failure of each class."""
        for ev in events:
            if ev.kind in MOMENT_KINDS and ev.severity in ("error", "critical"):
                self.items.append((ev.t, ev.message))
            elif ev.kind == "failure":
                cls = str(ev.data.get("failure_class"))
                if cls not in self._classes:
                    self._classes.add(cls)
                    self.items.append((ev.t, f"the first {cls} failure"))


@dataclass(frozen=True)
class TimelineInputs:
    """What the timeline needs besides the journals."""

    judged_start_s: float
    """The judged issue window's start: the barrier's release or the warm-up's end."""
    origin_s: float
    """The series origin (``soak.record.windows.series_origin``)."""
    window_s: int
    issue_end_s: float | None
    end_s: float
    """The end of the drain (or of the load, when it never drained)."""
    warmup_spec: str | None
    """``--warmup`` as given (None: no warm-up)."""
    thresholds: list[Threshold]
    """The run's thresholds (``--threshold``): its drift/leak ones replace the default
    soak policy's for the same figure."""
    soak_policy: str
    """``default`` or ``none`` (RunConfig.soak_policy)."""


def soak_policy(config: Mapping[str, Any]) -> Literal["default", "none"]:
    """The config's ``soak_policy`` (``default`` for a config older than 1.2)."""
    return "none" if config.get("soak_policy") == "none" else "default"


def warmup_over(events: Iterable[Event]) -> bool:
    """The warm-up ended while the load ran (the tick's ``warmup`` event says so)."""
    return any(ev.kind == "warmup" for ev in events)


def timeline_inputs(
    timing: LoadTiming,
    config: Mapping[str, Any],
    events: list[Event],
    thresholds: list[Threshold],
    now_s: float,
) -> TimelineInputs | None:
    """The timeline of a steady load (None: no judged load began). The series begins at
    the judged issue window's start (``issue_start_s``: the barrier's release, or the
    warm-up's end), so finalize, recover and verify cut the same windows."""
    spec = config.get("warmup")
    if not timing.barrier_released or timing.issue_start_s is None:
        return None
    if spec is not None and not warmup_over(events):
        return None
    end = timing.drain_end_s or timing.issue_end_s or now_s
    return TimelineInputs(
        judged_start_s=timing.issue_start_s,
        origin_s=series_origin(timing.issue_start_s),
        window_s=int(config.get("series_window_s") or 60),
        issue_end_s=timing.issue_end_s,
        end_s=end,
        warmup_spec=spec,
        thresholds=thresholds,
        soak_policy=str(config.get("soak_policy") or "default"),
    )


def not_judged(config: Mapping[str, Any], why: str, warmup: WarmupInfo | None) -> Endurance:
    """The endurance section of a run whose judged load never began."""
    return Endurance(
        window_s=int(config.get("series_window_s") or 60), warmup=warmup, not_judged_why=why
    )


def series_tally(
    inputs: TimelineInputs, method: PercentileMethod, share: ItlShare | None = None
) -> JournalWindows:
    """An empty tally of the window series over ``inputs``: offer it every line of
    ``requests.jsonl`` (:meth:`JournalWindows.offer`), then give it to
    :func:`judged_timeline`. ``share``: the gaps' store of the read it is offered in."""
    spec = SeriesSpec(inputs.origin_s, inputs.window_s, inputs.issue_end_s, inputs.end_s)
    return JournalWindows(spec, method, share)


def judged_timeline(
    run_dir: Path,
    inputs: TimelineInputs,
    events: Iterable[Event],
    method: PercentileMethod = "nearest-rank",
    tallied: JournalWindows | None = None,
) -> tuple[list[WindowFigures], Endurance]:
    """The record's ``windows`` (from the journals, exact) and ``endurance``.

    ``tallied``: the request lines already offered to :func:`series_tally`'s tally in a
    read the caller made (None: read ``requests.jsonl`` for them here)."""
    if tallied is None:
        tallied = series_tally(inputs, method).read(run_dir)
    windows, warmup_lines = tallied.windows(run_dir), tallied.warmup
    warmup = None
    if inputs.warmup_spec is not None:
        warmup = WarmupInfo(
            spec=inputs.warmup_spec, end_s=inputs.judged_start_s, requests=warmup_lines
        )
    moments = Moments()
    moments.add(events)
    policy = policy_for(inputs.thresholds, "none" if inputs.soak_policy == "none" else "default")
    start = inputs.judged_start_s
    endurance = judge_endurance(
        windows,
        window_s=inputs.window_s,
        series_start_s=inputs.origin_s,
        warmup=warmup,
        policy=policy,
        moments=moments.items,
        when=lambda t: when(t, start),
    )
    return windows, endurance


class LiveJudge:
    """The live endurance view: the windows so far judged as finalize will judge the
    record's (same policy, same judge), from the live windows. Called at each window
    close, in a worker thread (:class:`soak.run.window_tick.WindowTick`)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        thresholds: list[Threshold],
        warmup: Callable[[], WarmupInfo | None],
        load_start_s: Callable[[], float | None],
    ) -> None:
        self.window_s = int(config.get("series_window_s") or 60)
        self.policy = policy_for(thresholds, soak_policy(config))
        self._warmup = warmup
        self._load_start = load_start_s

    def __call__(
        self, windows: list[WindowFigures], origin_s: float, moments: list[tuple[float, str]]
    ) -> EnduranceView:
        """The view of ``windows`` (closed so far)."""
        start = self._load_start()
        e = judge_endurance(
            windows,
            window_s=self.window_s,
            series_start_s=origin_s,
            warmup=self._warmup(),
            policy=self.policy,
            moments=moments,
            when=lambda t: when(t, start),
        )
        view = endurance_view(
            e, policy_states(self.policy, e), last=windows[-1] if windows else None
        )
        view.baseline = list(e.baseline)
        return view
