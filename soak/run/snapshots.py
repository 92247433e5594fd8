"""The once-a-second snapshot: the live view of the run, one line of ``snapshots.jsonl``.

The tick reads the run (its state, the generator's counters, the watchers' views, the live
percentiles) and writes; the TUI and the headless follower only read those lines. The tick
also applies operator controls and the live thresholds (an ``abort_on_fail`` breach past
its grace stops issuing), so both happen at most a tick after the fact.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from soak.judge.class_thresholds import class_live_metrics, threshold_classes
from soak.judge.coverage import LIVE_MIN_EXPECTED, coverage_reasons
from soak.judge.threshold_metrics import Figure
from soak.judge.thresholds import metrics_from_snapshot
from soak.record.models import Reason
from soak.record.sections import ThresholdState
from soak.record.snapshot import ClientView, LoadView, Snapshot
from soak.record.telemetry import SnapshotTelemetry
from soak.run.config_steps import planned_steps
from soak.run.load_now import OpenLoopTally, steps_now
from soak.run.matrix_run import matrix_progress
from soak.run.request_sink import RequestSink
from soak.run.shard_health import BehindHint, ShardHealthReader, shard_view
from soak.run.state import RunParts
from soak.run.stops import RunControls
from soak.run.window_tick import WindowTick
from soak.watch.gpu.sources import gpu_entries, gpu_source_status


def _round4(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def now_iso() -> str:
    """Wall-clock now, for humans and for lining up with server logs."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class SnapshotTick:
    """Builds and appends the run's snapshots."""

    def __init__(self, parts: RunParts, sink: RequestSink, windows: WindowTick) -> None:
        self.parts = parts
        self.sink = sink
        self.windows = windows
        self.listeners: list[Callable[[Snapshot], None]] = []
        """Called with each snapshot once written (the metrics endpoint): never changed after."""
        self._seq = 0
        self._open_loop = OpenLoopTally(parts.state.config, parts.live.window_s)
        self._planned_steps = len(planned_steps(parts.state.config)) or None
        self._threshold_classes = threshold_classes(
            t.metric for t in parts.threshold_watch.thresholds
        )  # only their live views are worth building each tick (each costs ~60 µs)
        cfg = parts.state.config
        self._shard_health = (
            ShardHealthReader(cfg.max_loop_lag_s, cfg.max_client_behind) if cfg.shards > 1 else None
        )
        self._behind_hint = BehindHint(cfg.shards, cfg.client_overload_s)

    def write(self, status: str = "running", reasons: list[Reason] | None = None) -> None:
        """Append one snapshot (also flushes aggregated failure counts as an event)."""
        p, st = self.parts, self.parts.state
        self.sink.flush_unreported()
        now = st.now_s()
        load = self._load_view(now)
        coverage = p.watchers.coverage(now, LIVE_MIN_EXPECTED)
        if status == "running" and coverage:  # the sources lost so far: a verdict so far
            required = st.config.require_telemetry
            gpu = gpu_source_status(p.watchers.gpu_sources) if "gpu" in required else []
            reasons = coverage_reasons({"coverage": coverage, "gpu_sources": gpu}, required)
        w = p.watchers
        snap = Snapshot(
            seq=self._seq,
            t=now,
            wall=now_iso(),
            run_id=st.run_id,
            phase=st.phase,
            phase_elapsed_s=now - st.phases[-1].start_s,
            load=load,
            client=self._client_view(load),
            gates=p.gates.view() if p.gates else {},
            telemetry=SnapshotTelemetry.model_validate(
                ({"engines": w.engines.view()} if w.engines else {})
                | ({"gpus": gpu_entries(w.gpu_sources, "view")} if w.gpu_sources else {})
                | (w.faults.view() if w.faults else {})
                | {"host": w.host.view()}
                | ({"coverage": coverage} if coverage else {})
            ),
            events=st.events.take_pending(),
            status=status,
            reasons=reasons or [],
        )
        self.windows.observe(snap)  # may close a window: the view is then refreshed
        if self.windows.view is not None:  # written once the first window closed
            snap.endurance = self.windows.view
        if (progress := matrix_progress(st)) is not None:  # a matrix run's only
            snap.matrix = progress
        if (open_loop := self._open_loop.view(st, p.live)) is not None:  # open loop's only
            snap.open_loop = open_loop
        if (
            steps := steps_now(st, p.live, self._planned_steps)
        ) is not None:  # a stepped load's only
            snap.steps = steps
        if (shards := shard_view(st.gen, self._shard_health)) is not None:  # sharded only
            snap.shards = shards
        if p.threshold_watch.thresholds:
            snap.thresholds = self._thresholds_now(snap)
        self._seq += 1
        p.journals.snapshots.write_raw(orjson.dumps(snap.model_dump(mode="json")))
        for listener in self.listeners:
            listener(snap)

    async def loop(self, controls: RunControls) -> None:
        """Every ``snapshot_interval_s``: controls, then a snapshot; until cancelled."""
        st = self.parts.state
        seen: set[str] = set()
        while True:
            await asyncio.sleep(st.config.snapshot_interval_s)
            try:
                controls.apply()
                self.write()
            except Exception as e:  # snapshots and controls must outlive any one tick
                traceback.print_exc()
                words = f"the snapshot tick: {type(e).__name__}: {e}"[:300]
                if words not in seen:  # once per distinct failure, not once a second
                    seen.add(words)
                    st.internal_errors.append(words)

    def _load_view(self, now: float) -> LoadView:
        st, cfg = self.parts.state, self.parts.state.config
        gen = st.gen
        gs = gen.state if gen else None
        if gs is None or gs.barrier_released_ns is None:
            return LoadView(
                requested_concurrency=cfg.concurrency,
                workers_started=gs.workers_started if gs else 0,
                issue_total_s=None if cfg.matrix else cfg.duration_s,
            )
        now_ns = time.perf_counter_ns()
        # A matrix runs one generator per batch: its figures run from the first batch on
        # (warm-ups included), and the requested concurrency is the current cell's.
        started_ns = st.matrix_start_ns or gs.barrier_released_ns
        load_start = (started_ns - st.origin_ns) / 1e9
        issue_elapsed = ((gs.issue_ended_ns or now_ns) - gs.barrier_released_ns) / 1e9
        load_elapsed = ((gs.drain_ended_ns or now_ns) - started_ns) / 1e9
        live = self.parts.live
        cum = live.cumulative(load_elapsed)
        gen_plan = gen.plan if gen is not None else None
        per_plan = cfg.matrix or cfg.arrival != "closed"  # open loop: warmed connections
        requested = gen_plan.concurrency if per_plan and gen_plan else cfg.concurrency
        if not per_plan and st.steps and gen is not None:
            requested = gen.concurrency_target  # a stepped closed loop: its target now
        return LoadView(
            requested_concurrency=requested,
            workers_started=gs.workers_started,
            in_flight=gs.in_flight,
            issued=gs.issued,
            completed=cum.completed,
            failed=cum.failed,
            cancelled=gs.cancelled,
            failures_by_class=cum.failures_by_class,
            issue_elapsed_s=issue_elapsed,
            issue_total_s=None if cfg.matrix else cfg.duration_s,
            window=live.window(now, load_start),
            cumulative=cum,
        )

    def _client_view(self, load: LoadView) -> ClientView:
        st = self.parts.state
        gs = st.gen.state if st.gen else None
        s = self.parts.watchers.host.tick(
            st.now_s(),
            measuring=st.phase in ("load", "drain", "matrix"),
            issuing=st.phase == "load" and not st.paused,
            in_flight=load.in_flight,
            # Open loop: fewer in flight than connections warmed is the schedule's gaps,
            # not a client falling behind (its own check is the lateness).
            # A stepped closed loop: the workers its target lets issue (parked ones are
            # the plan, not a shortfall).
            workers=st.gen.active_workers if st.gen and st.config.arrival == "closed" else 0,
            backoffs=gs.backoffs if gs else 0,
        )
        lag = self.parts.lag.take_interval(keep=st.phase in ("load", "drain"))
        live = self.parts.live
        reads = live.tick_reads(  # the client_behind streak, as the CPU one
            st.now_s(), st.config.max_client_behind, st.phase in ("load", "drain", "matrix")
        )
        streak = live.behind_streak
        if hint := self._behind_hint.check(streak.since, st.now_s(), reads.behind_fraction_1s):
            st.events.emit("warning", hint, "warning", code="client_behind")
        return ClientView(
            cpu_percent=s.cpu_percent,
            rss_mb=round(s.rss_mb, 1),
            threads=s.threads,
            open_files=s.open_files,
            fd_limit=s.fd_limit,
            loop_lag_s=lag,
            behind_fraction=_round4(reads.behind_fraction),
            behind_fraction_1s=_round4(reads.behind_fraction_1s),
            events_per_read=_round4(reads.events_per_read),
        )

    def _live_metrics(self, snap: Snapshot) -> dict[str, Figure]:
        """The snapshot's live figures and, for a mix, each class's from its tally (read
        from the live stats: the snapshot carries the whole load's view only)."""
        metrics = metrics_from_snapshot(snap)
        cum = snap.load.cumulative
        if self._threshold_classes and cum is not None:  # the load's elapsed is the classes'
            views = self.parts.live.class_cumulative(cum.span_s, self._threshold_classes)
            metrics |= class_live_metrics(views)
        return metrics

    def _thresholds_now(self, snap: Snapshot) -> list[ThresholdState]:
        """Live threshold states (kept from the last load tick outside the load); an
        abort_on_fail breach past its grace stops issuing — a FAILED run, not ABORTED."""
        st, watch = self.parts.state, self.parts.threshold_watch
        if snap.phase in ("load", "drain") or not watch.states:
            elapsed = snap.load.issue_elapsed_s if snap.phase in ("load", "drain") else None
            before = {s.expr for s in watch.states if s.state == "breached"}
            for ts in watch.update(self._live_metrics(snap), snap.t, elapsed):
                if ts.state == "breached" and ts.expr not in before:
                    st.events.emit(
                        "threshold",
                        f"threshold {ts.condition} breached live: observed {ts.observed}",
                        "warning",
                        expr=ts.expr,
                    )
        due = watch.abort_due() if snap.phase == "load" else None
        if due is not None and st.threshold_abort is None and st.gen is not None:
            st.threshold_abort = due
            st.events.emit(
                "threshold",
                f"threshold {due.condition} breached past its grace: stopping the load "
                "(abort_on_fail)",
                "error",
                expr=due.expr,
            )
            st.gen.stop_issuing(f"threshold {due.condition} breached (abort_on_fail)")
        return list(watch.states)
