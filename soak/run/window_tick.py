"""The live window series: whole seconds of the live figures folded into soak windows.

Called by the snapshot tick once a second, after the snapshot is built: it folds every
second that has finished into its window (the live per-second slots, so nothing is added
on the request path), adds the snapshot's telemetry samples (engine, host, GPUs, loop
lag) to the window of their time, and when a window's last second is in, writes its
``windows.jsonl`` line and refreshes the live judgement (:attr:`WindowTick.view`), which
every snapshot then carries. Finalize flushes the last, partial windows.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import orjson

from loadgen.live import SecondsFold, ThroughputView
from soak.judge.endurance_verdict import endurance_view
from soak.record.endurance import (
    WINDOWS_SCHEMA_VERSION,
    Endurance,
    EnduranceView,
    WarmupInfo,
    WindowFigures,
)
from soak.record.journal import JsonlWriter
from soak.record.sections import ThresholdState
from soak.record.snapshot import Snapshot
from soak.record.windows import (
    GaugeWindow,
    WindowKind,
    gpu_key,
    host_sample_into,
    load_figures,
    preemptions_since,
    series_origin,
    window_kind,
)
from soak.run.state import RunState
from soak.run.timeline import Moments

MAX_LIVE_WINDOWS = 10_000
"""Windows kept in memory for the live judgement (a day of 10 s windows); the journal
keeps every one."""

Judge = Callable[[list[WindowFigures], float, list[tuple[float, str]]], EnduranceView]
"""(windows so far, series origin, moments) → the live view."""


class WindowTick:
    """The run's live window series."""

    def __init__(self, state: RunState, fold: SecondsFold, journal: JsonlWriter) -> None:
        self.state = state
        self.fold = fold
        self.journal = journal
        self.window_s = state.config.series_window_s
        self.origin_s: float | None = None
        self.windows: list[WindowFigures] = []
        self.moments = Moments()
        self.view: EnduranceView | None = None
        self.judge: Judge | None = None
        """Set by the runner (the live endurance judge); None: no live judgement."""
        self.judge_s = 0.0
        """How long the last live judgement took (in a worker thread, once a window)."""
        self._pending: asyncio.Future[tuple[EnduranceView, float]] | None = None
        self._next_second: int | None = None
        self._gauges: dict[int, GaugeWindow] = {}
        self._preempt: dict[int, float] = {}

    # -- the timeline ---------------------------------------------------------------------

    def _judged_start_s(self) -> float | None:
        """The barrier's release, or the warm-up's end once known (None before)."""
        st = self.state
        released = st.load_start_s()
        if released is None or st.config.matrix:
            return None
        if st.warmup is None:
            return released
        if st.warmup.end_ns is None and st.warmup.spec.seconds is not None:
            st.warmup.released(st.origin_ns + int(released * 1e9))
        if st.warmup.end_ns is None or st.warmup.end_ns > time.perf_counter_ns():
            return None  # the warm-up goes on
        return (st.warmup.end_ns - st.origin_ns) / 1e9

    def _index(self, t: float) -> int | None:
        if self.origin_s is None or t < self.origin_s:
            return None
        return int((t - self.origin_s) // self.window_s)

    def _issue_end_s(self) -> float | None:
        gen = self.state.gen
        ns = gen.state.issue_ended_ns if gen is not None else None
        return None if ns is None else (ns - self.state.origin_ns) / 1e9

    # -- each tick ------------------------------------------------------------------------

    def observe(self, snap: Snapshot) -> None:
        """Fold the finished seconds, add the snapshot's samples, close finished windows."""
        self.moments.add(snap.events)
        self._take_view()
        if snap.phase not in ("load", "drain"):
            return
        if self.origin_s is None:
            start = self._judged_start_s()
            if start is None:
                return
            if self.state.warmup is not None:
                self.state.events.emit(
                    "warmup",
                    f"warm-up {self.state.warmup.spec.spec} over at "
                    f"{self.state.when(start)}: {self.state.warmup.journaled} requests "
                    "journaled as warmup; the judged load begins",
                    end_s=start,
                )
            self.origin_s = series_origin(start)
            self._next_second = int(self.origin_s)
        self._samples(snap)
        self._fold_until(int(snap.t))

    def flush(self, now_s: float) -> None:
        """At the end: fold what is left and close the last window (partial or drain)."""
        if self.origin_s is None or self._next_second is None:
            return
        self._fold_until(int(now_s) + 1, final=True)

    def _fold_until(self, current: int, final: bool = False) -> None:
        """Fold whole seconds below ``current``; close each window whose seconds are in."""
        assert self.origin_s is not None and self._next_second is not None
        w = self.window_s
        origin = int(self.origin_s)
        while self._next_second < current:
            second = self._next_second
            self.fold.add(second)
            self._next_second = second + 1
            if (self._next_second - origin) % w == 0:
                self._close((second - origin) // w)
        if final and (self._next_second - origin) % w:
            self._close((self._next_second - origin) // w)

    def _samples(self, snap: Snapshot) -> None:
        i = self._index(snap.t)
        if i is None:
            return
        g = self._gauges.setdefault(i, GaugeWindow())
        tel = snap.telemetry
        for e in tel.engines:
            if e.status != "ok" or e.endpoint is None:
                continue
            values = {"running": e.running, "waiting": e.waiting, "kv_usage": e.kv_usage}
            preempted = preemptions_since(self._preempt, e.endpoint, e.preemptions_total)
            g.engine(e.endpoint, values, preempted)
        if tel.host is not None and tel.host.t is not None:
            host_sample_into(g, tel.host.model_dump(mode="json"))
        for gpu in tel.gpus:
            if gpu.status == "ok":
                reading = {"host": gpu.host, "index": gpu.index}
                g.gpu(gpu_key(reading), gpu.memory_used_mib, gpu.util_percent)
        if snap.client.loop_lag_s is not None:
            g.lags.append(snap.client.loop_lag_s)
        if snap.client.behind_fraction_1s is not None:
            g.behind.append(snap.client.behind_fraction_1s)

    def _close(self, i: int) -> None:
        assert self.origin_s is not None
        start = self.origin_s + i * self.window_s
        end = start + self.window_s
        view, lost = self.fold.take(self.window_s)
        kind = window_kind(start, end, self._issue_end_s())
        w = live_window(i, start, end, kind, view)
        if lost:
            w.lost_seconds = lost
        self._gauges.pop(i, GaugeWindow()).apply(w)
        self.journal.write_raw(orjson.dumps(w.model_dump(mode="json")))
        if len(self.windows) < MAX_LIVE_WINDOWS:
            self.windows.append(w)
        self._judge_later()

    def _judge_later(self) -> None:
        """Judge the windows so far in a worker thread (tens of ms for a long run: not on
        the measuring loop); the view is taken up at a later tick (:meth:`_take_view`).
        One judgement at a time: a window that closes meanwhile waits for the next."""
        if self.judge is None or self._pending is not None or self.origin_s is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # finalize's flush: the record's judgement follows
        judge, windows, origin = self.judge, list(self.windows), self.origin_s
        moments = list(self.moments.items)

        def run() -> tuple[EnduranceView, float]:
            t0 = time.perf_counter()
            return judge(windows, origin, moments), time.perf_counter() - t0

        self._pending = loop.run_in_executor(None, run)

    def _take_view(self) -> None:
        """The finished live judgement, if one is."""
        pending = self._pending
        if pending is None or not pending.done():
            return
        self._pending = None
        try:
            self.view, self.judge_s = pending.result()
        except Exception as e:  # the live view is lost, never the snapshot or the run
            words = f"the live endurance judgement: {type(e).__name__}: {e}"[:300]
            print(f"soaktop runner: {words}", file=sys.stderr)
            if words not in self.state.internal_errors:
                self.state.internal_errors.append(words)

    def final_view(self, endurance: Endurance, states: list[ThresholdState]) -> None:
        """At the end: the view of the record's judgement (its drift and leak states)."""
        trend = [s for s in states if s.metric.startswith(("drift.", "leak."))]
        last = next((w for w in reversed(self.windows) if w.kind == "load"), None)
        self.view = endurance_view(endurance, trend, last=last)
        self.view.baseline = list(endurance.baseline)

    def warmup_info(self) -> WarmupInfo | None:
        """The warm-up as the record labels it."""
        st = self.state
        if st.warmup is None:
            return None
        end = st.warmup.end_ns
        return WarmupInfo(
            spec=st.warmup.spec.spec,
            end_s=None if end is None else (end - st.origin_ns) / 1e9,
            requests=st.warmup.journaled,
        )


def live_window(
    i: int, start: float, end: float, kind: WindowKind, view: ThroughputView
) -> WindowFigures:
    """A window's load figures from the live histograms (a ``windows.jsonl`` line)."""
    w = WindowFigures(
        schema_version=WINDOWS_SCHEMA_VERSION,
        i=i,
        start_s=start,
        end_s=end,
        kind=kind,
        source="live",
    )
    load_figures(
        w,
        completed=view.completed,
        failed=view.failed,
        output_tokens=view.output_tokens,
        failures=view.failures_by_class,
        sanity=dict(getattr(view, "sanity_by_flag", {})),
        flagged=int(getattr(view, "sanity_flagged", 0)),
    )
    latencies = {"ttft": view.ttft_s, "e2e": view.e2e_s, "itl": view.itl_s, "tpot": view.tpot_s}
    for key, stats in latencies.items():
        setattr(w, f"{key}_p50", stats.p50)
        setattr(w, f"{key}_p99", stats.p99)
    return w
