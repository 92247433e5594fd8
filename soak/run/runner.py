"""The runner process: identity → barrier → load → drain → verdict → record.

Started by the CLI (or the TUI) as ``python -m soak.run.runner`` in its own session, with the
RunConfig as JSON on stdin. It prints exactly one handshake line on stdout
(``{"run_dir", "run_id", "pid"}``), then sends its own stdout/stderr to ``runner.log``
so nothing it prints can reach an operator's screen. Everything it measures goes into
the run directory as it happens; SIGINT/SIGTERM/SIGHUP end in a written record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from loadgen import eventloop
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats
from loadgen.prompts import BodyBuilder, PromptPool, PromptPoolError, load_file, synthetic
from loadgen.workers import LoadGenerator, LoadPlan
from probes.engine_metrics import EngineSample
from probes.gates import GatePlan
from probes.host import LoopLagMonitor, raise_fd_limit
from probes.probe import ProbeOptions
from probes.suite import load_suites
from soak.judge.coverage import LIVE_MIN_EXPECTED, LoadWindow, coverage_reasons, gather
from soak.judge.thresholds import Threshold, ThresholdWatch, metrics_from_snapshot, parse_thresholds
from soak.record.events import EventLog
from soak.record.faults import when as when_words
from soak.record.journal import (
    RESERVE_BYTES,
    DropWriteErrors,
    JsonlWriter,
    request_line,
    reserve_space,
    storage_words,
)
from soak.record.matrix import CellResult, MatrixSummary, parse_matrix
from soak.record.models import (
    EXIT_STORAGE,
    EXIT_USAGE,
    EndpointIdentity,
    PhaseSpan,
    Reason,
    write_atomic,
)
from soak.record.redact import Redactor
from soak.record.snapshot import ClientView, LoadView, Snapshot
from soak.record.summary import LoadTiming
from soak.run.config import RunConfig
from soak.run.control import ControlReader
from soak.run.finalize import build_identity, finalize_run
from soak.run.gate_session import GateSession
from soak.run.identity import count_tokens, probe_all
from soak.run.matrix_run import MatrixRun
from soak.run.redaction import RedactingStream, RedactingWriter, redactor_for_run, run_id_model
from soak.run.runid import create_run_dir, make_run_id
from soak.run.spawn import LIFELINE_GONE, lifeline_arg, watch_lifeline
from soak.watch.engine import EngineWatch
from soak.watch.gpu.dcgm import GpuWatch
from soak.watch.gpu.nvml import NvmlWatch
from soak.watch.gpu.sources import gpu_entries, gpu_source_status
from soak.watch.health import FaultWatch
from soak.watch.host import HostWatch
from soak.watch.parse_worker import off_loop_parser

PLAIN_FINISH = frozenset({None, "stop", "length", "tool_calls", "abort", "eos", "error"})
"""finish_reason values with nothing to scrub (anything else is server text)."""

FAILURE_EVENTS_PER_CLASS = 20
"""Individual failure events per class; beyond it failures are aggregated per tick."""


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def auth_headers(config: RunConfig) -> dict[str, str]:
    """Authorization from the environment variable named in the config (never written)."""
    if config.api_key_env and (key := os.environ.get(config.api_key_env)):
        return {"Authorization": f"Bearer {key}"}
    return {}


class Runner:
    """One run, from the created run directory to the record."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        run_id: str,
        origin_ns: int,
        started_at: str,
        endpoints: list[EndpointIdentity],
        pool: PromptPool | None,
        clock: dict[str, object],
        redactor: Redactor | None = None,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.run_id = run_id
        self.origin_ns = origin_ns
        self.started_at = started_at
        self.endpoints = endpoints
        self.pool = pool
        self.clock = clock
        secrets = [v.removeprefix("Bearer ") for v in auth_headers(config).values()]
        self.redactor = redactor or Redactor(config.endpoints, config.redact, secrets)
        # Every journal line passes the redactor (requests: see on_result, the hot path).
        journal = (
            partial(RedactingWriter, redactor=self.redactor)
            if self.redactor.active
            else JsonlWriter
        )
        self.storage_error: str | None = None
        """Why the run directory could not be written (disk full...), once it could not."""
        self._stopped_by_storage = False
        self._loop: asyncio.AbstractEventLoop | None = None
        fail = self._journal_failed
        self.events = EventLog(
            journal(run_dir / "events.jsonl", on_error=fail), origin_ns, self.redactor
        )
        self.requests = JsonlWriter(run_dir / "requests.jsonl", fail)
        self.snapshots = journal(run_dir / "snapshots.jsonl", on_error=fail)
        self.telemetry = journal(run_dir / "telemetry.jsonl", on_error=fail)
        self.engines: EngineWatch | None = None
        self.counters_before: list[EngineSample] | None = None
        self.counters_after: list[EngineSample] | None = None
        self.gates: GateSession | None = None
        self.faults: FaultWatch | None = None
        self.gpu_sources: list[GpuWatch | NvmlWatch] = []
        self.gate_counters: dict[str, tuple[list[EngineSample], list[EngineSample]]] = {}
        """Engine counters at the start and end of each gate phase (reconciliation)."""
        self.before_blocked = False
        self.hard_stop = False
        self._gate_task: asyncio.Task[object] | None = None
        self._canary_task: asyncio.Task[None] | None = None
        self._canary_stop = asyncio.Event()
        self.threshold_watch = ThresholdWatch(
            parse_thresholds(config.thresholds, gpu_telemetry=config.gpu_telemetry)
        )
        self.threshold_abort: Threshold | None = None
        """The abort_on_fail threshold that stopped the load early, if one did."""
        self.live = LiveLoadStats(config.window_s)
        self.lag = LoopLagMonitor()
        self.window = LoadWindow()
        """The load's window (barrier release → end of drain): every source's coverage."""
        self.host = HostWatch(
            self.telemetry,
            self.events,
            config.server_pid,
            config.max_client_cpu_percent,
            interval_s=config.snapshot_interval_s,
            window=self.window,
        )
        self.control = ControlReader(run_dir / "control.jsonl")
        self.gen: LoadGenerator | None = None
        self.phase = "identity"
        self.phases: list[PhaseSpan] = [PhaseSpan(name="identity", start_s=0.0)]
        self.stop_asked: str | None = None
        self.signals = 0
        self.preflight_errors: list[str] = []
        self.internal_errors: list[str] = []
        self.early_signals: list[int] = []
        self.released_at: str | None = None
        self.barrier_wait_s: float | None = None
        self._seq = 0
        self._failures: dict[str, int] = {}
        """Failures per class so far: only for the per-class event limit."""
        self._unreported: dict[str, int] = {}
        self.request_phase = "load"
        """The ``phase`` written with each journaled request (the matrix: warmup, matrix)."""
        self.matrix: MatrixSummary | None = None
        """The matrix profile's results, when the config asked for one."""
        self.matrix_cells: list[CellResult] = []
        """The matrix's cells so far (filled as they finish; the record's come from here)."""
        self.matrix_start_ns: int | None = None
        """When the matrix's first batch began (its live figures count from there)."""

    # -- time and phases -------------------------------------------------------------------

    def now_s(self) -> float:
        """Seconds since the run's monotonic origin."""
        return (time.perf_counter_ns() - self.origin_ns) / 1e9

    def load_start_s(self) -> float | None:
        """When the barrier released (seconds since the origin), None before; for the
        matrix, when its first timed repetition began (as ``soak.record.faults.load_start``)."""
        if self.config.matrix:
            reps = [r for c in self.matrix_cells for r in c.reps]
            return reps[0].start_s if reps else None
        st = self.gen.state if self.gen else None
        if st is None or st.barrier_released_ns is None:
            return None
        return (st.barrier_released_ns - self.origin_ns) / 1e9

    def when(self, t_s: float) -> str:
        """A run time in words for reasons: ``at load+00:17:02`` once the load began."""
        return when_words(t_s, self.load_start_s())

    def enter(self, phase: str, message: str, **data: Any) -> None:
        """Close the current phase and open ``phase`` (``data`` goes into its event)."""
        t = self.now_s()
        self.phases[-1].end_s = t
        self.phases.append(PhaseSpan(name=phase, start_s=t))
        self.phase = phase
        self.events.emit("phase", message, phase=phase, **data)

    # -- per request (the only code on the request path) -----------------------------------

    def on_result(self, r: RequestResult) -> None:
        """Journal one finished request and count it."""
        line = request_line(r, self.origin_ns, self.request_phase)
        if self.redactor.active and (r.failure_detail or r.finish_reason not in PLAIN_FINISH):
            line = self.redactor.json_line(line)  # server text: only then worth the pass
        self.requests.write_raw(line)
        self.live.record(r, self.now_s())
        if r.failure is not None and not r.cancelled:
            cls = str(r.failure)
            n = self._failures.get(cls, 0) + 1
            self._failures[cls] = n
            if n <= FAILURE_EVENTS_PER_CLASS:
                self.events.emit(
                    "failure",
                    f"{r.request_id}: {cls}"
                    + (f" — {r.failure_detail}" if r.failure_detail else ""),
                    "error",
                    failure_class=cls,
                    request_id=r.request_id,
                    status=r.status,
                )
            else:
                self._unreported[cls] = self._unreported.get(cls, 0) + 1

    # -- storage ---------------------------------------------------------------------------

    def _journal_failed(self, writer: JsonlWriter, err: OSError) -> None:
        self.storage_failed(writer.path.name, err)

    def storage_failed(self, what: str, err: OSError) -> None:
        """The run directory could not be written: stop issuing at once (nothing more can
        be journaled), cut in-flight requests and end with a record that says why.

        Called by a journal from any thread; the stop itself runs on the runner's loop."""
        if self.storage_error is not None:
            return
        self.storage_error = f"{storage_words(err)} writing {what} {self.when(self.now_s())}"
        with contextlib.suppress(OSError):  # runner.log is on the same, full, disk
            print(f"soaktop runner: {self.storage_error}", file=sys.stderr, flush=True)
        loop = self._loop
        if loop is None or _on_loop(loop):
            self._stop_for_storage()
        else:
            loop.call_soon_threadsafe(self._stop_for_storage)

    def _stop_for_storage(self) -> None:
        if self.stop_asked is None:
            self._stopped_by_storage = True
        self.ask_stop("the run directory could not be written", hard=True)

    @property
    def stop_reason_words(self) -> str | None:
        """The operator's or a signal's stop, for the verdict (a storage stop is its own
        reason, never "aborted by the operator")."""
        return None if self._stopped_by_storage else self.stop_asked

    # -- signals and control ---------------------------------------------------------------

    def ask_stop(self, why: str, hard: bool = False) -> None:
        """Graceful stop (drain, record) or, when ``hard``, cancel in-flight requests too."""
        if self.stop_asked is None:
            self.stop_asked = f"{why} during {self.phase} at {self.now_s():.1f} s"
        self.events.emit("control", f"{'abort' if hard else 'stop'} asked: {why}", "warning")
        self._canary_stop.set()
        if not hard and self.gates is not None:
            self.gates.cut()  # a before/after gate phase ends promptly, its rest not run
        if hard:
            self.hard_stop = True
            for task in (self._gate_task, self._canary_task):
                if task is not None:
                    task.cancel()
        if self.gen is not None:
            if hard:
                self.gen.abort()
            else:
                self.gen.stop_issuing(f"stopped: {why}")

    def on_signal(self, signum: int) -> None:
        """First signal: graceful stop. A second SIGINT (or any third): abort the drain."""
        self.signals += 1
        name = signal.Signals(signum).name
        hard = self.signals >= 3 or (self.signals >= 2 and signum == signal.SIGINT)
        self.ask_stop(name, hard=hard)

    def _apply_control(self) -> None:
        for cmd in self.control.poll():
            kind = cmd.get("cmd")
            if kind == "mark":
                self.events.emit("mark", str(cmd.get("note", "")) or "operator mark")
            elif kind in ("stop", "abort"):
                self.ask_stop(f"operator {kind}", hard=kind == "abort")
            elif kind in ("pause", "resume"):
                self._pause(kind == "pause", str(cmd.get("note", "")))
            else:
                self.events.emit("warning", f"unknown control command {kind!r} ignored", "warning")

    @property
    def paused(self) -> bool:
        """Issuing is paused by the operator."""
        return self.gen is not None and self.gen.paused

    def _pause(self, pause: bool, note: str) -> None:
        """Pause or resume issuing; only inside the issue window. A pause is a phase of its
        own (``paused``) on the timeline and a note on the verdict."""
        gen = self.gen
        why = f" ({note})" if note else ""
        if gen is None or self.phase not in ("load", "paused"):
            self.events.emit(
                "control", f"{'pause' if pause else 'resume'} ignored: not issuing", "warning"
            )
            return
        if pause and not gen.paused:
            gen.pause()
            self.events.emit("control", f"operator paused issuing{why}", "warning")
            self.enter("paused", "issuing paused by the operator; in-flight requests finish")
        elif not pause and gen.paused:
            gen.resume()
            self.events.emit("control", f"operator resumed issuing{why}")
            self.enter("load", "issuing resumed")

    # -- snapshots -------------------------------------------------------------------------

    def _load_view(self, now: float) -> LoadView:
        st = self.gen.state if self.gen else None
        if st is None or st.barrier_released_ns is None:
            return LoadView(
                requested_concurrency=self.config.concurrency,
                workers_started=st.workers_started if st else 0,
                issue_total_s=None if self.config.matrix else self.config.duration_s,
            )
        now_ns = time.perf_counter_ns()
        # A matrix runs one generator per batch: its figures run from the first batch on
        # (warm-ups included), and the requested concurrency is the current cell's.
        started_ns = self.matrix_start_ns or st.barrier_released_ns
        load_start = (started_ns - self.origin_ns) / 1e9
        issue_elapsed = ((st.issue_ended_ns or now_ns) - st.barrier_released_ns) / 1e9
        load_elapsed = ((st.drain_ended_ns or now_ns) - started_ns) / 1e9
        cum = self.live.cumulative(load_elapsed)
        gen_plan = self.gen.plan if self.gen is not None else None
        requested = (
            gen_plan.concurrency if self.config.matrix and gen_plan else self.config.concurrency
        )
        return LoadView(
            requested_concurrency=requested,
            workers_started=st.workers_started,
            in_flight=st.in_flight,
            issued=st.issued,
            completed=cum.completed,
            failed=cum.failed,
            cancelled=st.cancelled,
            failures_by_class=cum.failures_by_class,
            issue_elapsed_s=issue_elapsed,
            issue_total_s=None if self.config.matrix else self.config.duration_s,
            window=self.live.window(now, load_start),
            cumulative=cum,
        )

    def _client_view(self, load: LoadView) -> ClientView:
        st = self.gen.state if self.gen else None
        s = self.host.tick(
            self.now_s(),
            measuring=self.phase in ("load", "drain", "matrix"),
            issuing=self.phase == "load" and not self.paused,
            in_flight=load.in_flight,
            workers=load.workers_started,
            backoffs=st.backoffs if st else 0,
        )
        lag = self.lag.take_interval(keep=self.phase in ("load", "drain"))
        return ClientView(
            cpu_percent=s.cpu_percent,
            rss_mb=round(s.rss_mb, 1),
            threads=s.threads,
            open_files=s.open_files,
            fd_limit=s.fd_limit,
            loop_lag_s=lag,
        )

    def write_snapshot(self, status: str = "running", reasons: list[Reason] | None = None) -> None:
        """Append one snapshot (also flushes aggregated failure counts as an event)."""
        if self._unreported:
            more = ", ".join(f"{n} {c}" for c, n in self._unreported.items())
            self.events.emit("failures", f"{more} more failures", "error", counts=self._unreported)
            self._unreported = {}
        now = self.now_s()
        load = self._load_view(now)
        coverage = self.coverage(LIVE_MIN_EXPECTED)
        if status == "running" and coverage:  # the sources lost so far: a verdict so far
            required = self.config.require_telemetry
            gpu = gpu_source_status(self.gpu_sources) if "gpu" in required else []
            reasons = coverage_reasons({"coverage": coverage, "gpu_sources": gpu}, required)
        snap = Snapshot(
            seq=self._seq,
            t=now,
            wall=_now_iso(),
            run_id=self.run_id,
            phase=self.phase,
            phase_elapsed_s=now - self.phases[-1].start_s,
            load=load,
            client=self._client_view(load),
            gates=self.gates.view() if self.gates else {},
            telemetry=(
                ({"engines": self.engines.view()} if self.engines else {})
                | ({"gpus": gpu_entries(self.gpu_sources, "view")} if self.gpu_sources else {})
                | (self.faults.view() if self.faults else {})
                | {"host": self.host.view()}
                | ({"coverage": coverage} if coverage else {})
            ),
            events=self.events.take_pending(),
            status=status,
            reasons=reasons or [],
        )
        if self.threshold_watch.thresholds:
            snap.thresholds = self._thresholds_now(snap)
        self._seq += 1
        self.snapshots.write_raw(orjson.dumps(snap.model_dump(mode="json")))

    def _thresholds_now(self, snap: Snapshot) -> list[dict[str, object]]:
        """Live threshold states (kept from the last load tick outside the load); an
        abort_on_fail breach past its grace stops issuing — a FAILED run, not ABORTED."""
        watch = self.threshold_watch
        if snap.phase in ("load", "drain") or not watch.states:
            elapsed = snap.load.issue_elapsed_s if snap.phase in ("load", "drain") else None
            before = {s.expr for s in watch.states if s.state == "breached"}
            for st in watch.update(metrics_from_snapshot(snap), snap.t, elapsed):
                if st.state == "breached" and st.expr not in before:
                    self.events.emit(
                        "threshold",
                        f"threshold {st.condition} breached live: observed {st.observed}",
                        "warning",
                        expr=st.expr,
                    )
        due = watch.abort_due() if snap.phase == "load" else None
        if due is not None and self.threshold_abort is None and self.gen is not None:
            self.threshold_abort = due
            self.events.emit(
                "threshold",
                f"threshold {due.condition} breached past its grace: stopping the load "
                "(abort_on_fail)",
                "error",
                expr=due.expr,
            )
            self.gen.stop_issuing(f"threshold {due.condition} breached (abort_on_fail)")
        return [s.model_dump(mode="json") for s in watch.states]

    def coverage(self, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """Every source's coverage of the load window so far (empty before the barrier)."""
        watchers = (self.engines, self.faults, *self.gpu_sources, self.host)
        return gather(watchers, self.now_s(), min_expected)

    async def _ticker(self) -> None:
        seen: set[str] = set()
        while True:
            await asyncio.sleep(self.config.snapshot_interval_s)
            try:
                self._apply_control()
                self.write_snapshot()
            except Exception as e:  # snapshots and controls must outlive any one tick
                traceback.print_exc()
                words = f"the snapshot tick: {type(e).__name__}: {e}"[:300]
                if words not in seen:  # once per distinct failure, not once a second
                    seen.add(words)
                    self.internal_errors.append(words)

    # -- the protocol ----------------------------------------------------------------------

    async def _calibrate_pool(self, headers: dict[str, str]) -> PromptPool:
        if self.pool is not None:
            return self.pool
        cfg = self.config
        base = self.config.endpoints[0]

        async def counter(text: str) -> int | None:
            return await count_tokens(base, cfg.model, text, headers)

        return await synthetic(
            count=cfg.pool_size,
            target_tokens=cfg.synthetic_input_tokens or 128,
            seed=cfg.pool_seed,
            unique_prefix=not cfg.shared_prefix,
            count_tokens=counter,
        )

    def _preflight(self) -> None:
        for ep in self.endpoints:
            ep.url = self.redactor.text(ep.url)
            ep.error = self.redactor.text(ep.error) if ep.error else None
            if not ep.reachable:
                self.preflight_errors.append(f"endpoint {ep.url} unreachable: {ep.error}")
            elif ep.error:
                self.preflight_errors.append(f"endpoint {ep.url}: {ep.error}")
            elif self.config.model not in {m.get("id") for m in ep.models}:
                served = ", ".join(str(m.get("id")) for m in ep.models) or "none"
                self.preflight_errors.append(
                    f"model {self.config.model!r} is not served by {ep.url} (serves: {served})"
                )

    async def run(self) -> int:
        """Run the protocol; always ends with a written record. Returns the exit code."""
        loop = self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.on_signal, sig)
        for early in self.early_signals:  # arrived before the handlers above existed
            self.on_signal(early)
        self.lag.start()
        ticker = asyncio.create_task(self._ticker())
        headers = auth_headers(self.config)
        try:
            self._preflight()
            for ep in self.endpoints:
                self.events.emit(
                    "identity",
                    f"{ep.url}: "
                    + (
                        f"{ep.engine or '?'} {ep.version or ''}".strip()
                        if ep.reachable
                        else f"unreachable ({ep.error})"
                    ),
                    "info" if ep.reachable else "error",
                )
            if not self.preflight_errors and self.stop_asked is None:
                if not self.config.matrix:  # the matrix builds one pool per cell
                    self.pool = await self._calibrate_pool(headers)
                # Written before the load so `soaktop recover` has it if we die.
                try:
                    write_atomic(
                        self.run_dir / "identity.json",
                        build_identity(self).model_dump_json(indent=2).encode(),
                    )
                except OSError as e:
                    self.storage_failed("identity.json", e)
            if not self.preflight_errors and self.stop_asked is None:
                self.engines = EngineWatch(
                    self.config.endpoints,
                    headers,
                    self.origin_ns,
                    self.telemetry,
                    self.config.telemetry_interval_s,
                    scrub=self.redactor.obj,
                    events=self.events,
                    window=self.window,
                    parser=off_loop_parser(),  # /metrics is parsed off the loop
                )
                self.engines.start()
                self.faults = FaultWatch(
                    self.config.endpoints,
                    headers,
                    self.events,
                    self.now_s,
                    self.config.telemetry_interval_s,
                    log_files=list(self.config.server_log),
                    log_commands=[shlex.split(c) for c in self.config.server_log_cmd],
                    keep_lines=not self.config.redact,
                    scrub=self.redactor.text,
                    window=self.window,
                )
                await self.faults.start()
                interval = self.config.telemetry_interval_s
                if self.config.nvml:
                    self.gpu_sources.append(
                        NvmlWatch(
                            self.origin_ns,
                            self.telemetry,
                            self.events,
                            interval,
                            self.redactor.obj,
                            ignore_xid=self.config.ignore_xid,
                            when=self.when,
                            window=self.window,
                        )
                    )
                if self.config.dcgm:
                    self.gpu_sources.append(
                        GpuWatch(
                            self.config.dcgm,
                            self.origin_ns,
                            self.telemetry,
                            self.events,
                            interval,
                            scrub=self.redactor.obj,
                            ignore_xid=self.config.ignore_xid,
                            when=self.when,
                            window=self.window,
                            parser=off_loop_parser("DCGM parser"),
                        )
                    )
                for source in self.gpu_sources:
                    source.start()
                if self.config.gates:
                    self.gates = self._gate_session(headers)
                    await self._gate_phase("before")
                    if self.gates.failed("before") and not self.config.force_load:
                        self.before_blocked = True
                        self.events.emit(
                            "gate",
                            "before-load gates failed: no load will run "
                            "(--force-load soaks anyway)",
                            "error",
                        )
                if not self.before_blocked and self.stop_asked is None:
                    if self.config.matrix:
                        spec = parse_matrix(self.config.matrix)
                        self.window.open(self.now_s())  # the matrix is the load's window
                        self.matrix = await MatrixRun(self, spec, headers).run()
                        self.window.close(self.now_s())
                    else:
                        await self._load(headers)
                    if self.gates is not None and not self.hard_stop:
                        await self._gate_phase("after")
        except Exception as e:  # a bug or an unexpected answer must still end in a record
            traceback.print_exc()  # into runner.log
            self.internal_errors.append(f"{type(e).__name__}: {e}"[:300])
            if self.gen is not None:
                self.gen.abort()
                await asyncio.gather(*self.gen.tasks, return_exceptions=True)
        finally:
            self.window.close(self.now_s())  # an internal error mid-load ends it here
            ticker.cancel()
            self.lag.stop()
            for name, closer in (
                ("engine watch", self.engines.stop if self.engines else None),
                ("fault watch", self.faults.stop if self.faults else None),
                *((f"GPU source {i}", src.stop) for i, src in enumerate(self.gpu_sources)),
                ("gates", self.gates.aclose if self.gates else None),
            ):
                if closer is not None:
                    await self._close_quietly(name, closer)
            for watcher in (self.engines, self.faults, *self.gpu_sources):
                if watcher is not None:
                    self.internal_errors += watcher.loop_errors
        return finalize_run(self, self.load_timing())

    async def _close_quietly(self, name: str, closer: Callable[[], Awaitable[None]]) -> None:
        """Stop a watcher; a failure to stop is recorded, and never costs the record."""
        try:
            await closer()
        except Exception as e:
            traceback.print_exc()
            self.internal_errors.append(f"stopping the {name}: {type(e).__name__}: {e}"[:300])

    # -- contract gates --------------------------------------------------------------------

    def _gate_session(self, headers: dict[str, str]) -> GateSession:
        cfg = self.config
        plan = GatePlan(
            run_id=self.run_id,
            endpoints=list(cfg.endpoints),
            suites=load_suites(cfg.gates, cfg.suite_files),
            origin_ns=self.origin_ns,
            concurrency=cfg.probe_concurrency,
            retries=cfg.probe_retries,
        )
        lens = [
            int(m["max_model_len"])
            for ep in self.endpoints
            for m in ep.models
            if m.get("id") == cfg.model and m.get("max_model_len")
        ]
        options = ProbeOptions(
            model=cfg.model,
            check_expected=cfg.probe_expected,
            timeout_s=cfg.probe_timeout_s,
            max_model_len=min(lens) if lens else None,
        )
        session = GateSession(
            run_dir=self.run_dir,
            plan=plan,
            options=options,
            headers=headers,
            events=self.events,
            redactor=self.redactor,
            server_logs=list(cfg.server_log),
            evidence_all=cfg.probe_evidence == "all",
        )
        session.journal.on_error = self._journal_failed
        session.on_storage_error = self.storage_failed
        return session

    async def _gate_phase(self, phase: str) -> None:
        """One before/after gate phase, with the engine counters around it."""
        assert self.gates is not None
        self.enter(f"{phase}_gates", f"{phase}-load contract gates: {', '.join(self.config.gates)}")
        start = await self.engines.scrape_all() if self.engines else None
        if self.hard_stop:  # an abort that came during the scrape: send nothing more
            self.events.emit("gate", f"{phase}-load gates skipped: the run was aborted", "warning")
            return
        if phase == "before" and self.stop_asked is not None:  # a stop during the scrape
            self.events.emit("gate", "before-load gates skipped: the run was stopped", "warning")
            return
        self._gate_task = asyncio.create_task(self.gates.run(phase))
        try:
            await self._gate_task
        except asyncio.CancelledError:
            if not self.hard_stop:
                raise
            self.events.emit("gate", f"{phase}-load gates cut short by an abort", "warning")
            return
        finally:
            self._gate_task = None
        if self.engines is not None and start is not None and phase not in self.gates.cut_phases:
            self.gate_counters[phase] = (start, await self.engines.settled_counters())

    async def _load(self, headers: dict[str, str]) -> None:
        cfg = self.config
        assert self.pool is not None
        before, after = raise_fd_limit(cfg.concurrency + 256)
        if after > before:
            self.events.emit("warning", f"raised the open-files limit {before} → {after}")
        self.enter("barrier", f"starting {cfg.concurrency} workers")
        plan = LoadPlan(
            endpoints=tuple(cfg.endpoints),
            concurrency=cfg.concurrency,
            duration_s=cfg.duration_s,
            max_requests=cfg.max_requests,
            drain_timeout_s=cfg.drain_timeout_s,
            barrier_timeout_s=cfg.barrier_timeout_s,
            request_id_prefix=f"{self.run_id}/load/{cfg.api}",
            backoff_max_s=cfg.failure_backoff_max_s,
        )
        bodies = BodyBuilder(
            model=cfg.model,
            api=cfg.api,
            max_tokens=cfg.max_tokens,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
        )
        async with StreamClient(
            max_connections=cfg.concurrency + 16,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            headers=headers,
        ) as client:
            gen = LoadGenerator(plan, client, self.pool, bodies, self.on_result)
            gen.on_issue_end = self._on_issue_end
            self.gen = gen
            t_barrier = time.perf_counter_ns()
            all_started = await gen.start_workers()
            st = gen.state
            wait_s = self.barrier_wait_s = (time.perf_counter_ns() - t_barrier) / 1e9
            self.events.emit(
                "barrier",
                f"{st.workers_started}/{cfg.concurrency} workers started in {wait_s:.2f} s",
                "info" if all_started else "error",
                workers_started=st.workers_started,
                requested=cfg.concurrency,
                failures={self.redactor.text(k): n for k, n in st.start_failures.items()},
            )
            if all_started and self.stop_asked is None:
                self.released_at = _now_iso()
                if self.engines is not None:  # the server's counters as the window opens
                    self.counters_before = await self.engines.scrape_all()
                    self.engines.tracking = True
                self.lag.take_interval(keep=False)  # barrier start-up lag is not load lag
                self.enter("load", f"barrier released: issuing for {cfg.duration_s} s")
                self.window.open(self.now_s())
                if self.gates is not None and cfg.canary_interval_s:
                    self._canary_task = asyncio.create_task(
                        self.gates.canary_loop(
                            cfg.canary_interval_s, cfg.canary_tasks, self._canary_stop
                        )
                    )
                await gen.run()
                self.window.close(self.now_s())  # the drain is over
                if (canary := self._canary_task) is not None:
                    # A round in flight finishes (its requests are in the counters) unless
                    # an abort cancels it, now or while we wait.
                    self._canary_stop.set()
                    if self.hard_stop:
                        canary.cancel()
                    await asyncio.gather(canary, return_exceptions=True)
                if self.engines is not None:
                    self.engines.tracking = False
                    self.counters_after = await self.engines.settled_counters()
                    self.engines.close_window()
            else:
                await gen.cancel_unstarted()

    def _on_issue_end(self) -> None:
        if self.gen is not None and self.gen.paused:
            self.gen.resume()  # stop is set: the workers wake only to leave
        self._canary_stop.set()  # no canary round starts during the drain
        self.enter("drain", "issue window closed; draining")

    def load_timing(self) -> LoadTiming | None:
        """The load's timing from the generator's state (None if no worker was started,
        and for the matrix profile, whose figures are per cell and repetition)."""
        if self.gen is None or self.config.matrix:
            return None
        st = self.gen.state
        scrub = self.redactor.text

        def rel(ns: int | None) -> float | None:
            return None if ns is None else (ns - self.origin_ns) / 1e9

        return LoadTiming(
            requested_concurrency=self.config.concurrency,
            workers_started=st.workers_started,
            barrier_released=st.barrier_released_ns is not None,
            worker_start_failures={scrub(k): n for k, n in st.start_failures.items()},
            barrier_released_at=self.released_at,
            barrier_wait_s=self.barrier_wait_s,
            issue_start_s=rel(st.barrier_released_ns),
            issue_end_s=rel(st.issue_ended_ns),
            drain_end_s=rel(st.drain_ended_ns),
            issued=st.issued,
            stop_reason=st.stop_reason,
            cancel_cause=st.cancel_cause,
            backoffs=st.backoffs,
            worker_errors={scrub(k): n for k, n in st.worker_errors.items()},
        )


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop in this thread
        return False


def _redirect_output(run_dir: Path, redactor: Redactor) -> None:
    log = os.open(run_dir / "runner.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    if redactor.active:  # what Python prints (tracebacks included) is scrubbed line by line
        sys.stdout = RedactingStream(sys.stdout, redactor)
        sys.stderr = RedactingStream(sys.stderr, redactor)
    # runner.log shares the run directory's disk: a print that fails there (a traceback
    # printed while the disk is full) must not cost the run its record.
    sys.stdout = DropWriteErrors(sys.stdout)
    sys.stderr = DropWriteErrors(sys.stderr)


async def start(config: RunConfig, lifeline_fd: int | None = None) -> int:
    """Identity, run directory, handshake, then the run. Returns the exit code.
    ``lifeline_fd``: see :func:`soak.run.spawn.runners_end_with_this_process`."""
    early: list[int] = []
    # A file-size limit (ulimit -f) must be a write error the run survives, not a kill.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, early.append, sig)
    origin_ns = time.perf_counter_ns()
    started_at = _now_iso()
    wall_at_origin = time.time()
    pool: PromptPool | None = None
    if config.prompts is not None:
        try:
            pool = load_file(config.prompts, seed=config.pool_seed, limit=config.pool_size)
        except PromptPoolError as e:
            print(f"soaktop: prompts: {e}", file=sys.stderr)
            return EXIT_USAGE
    endpoints = await probe_all(config.endpoints, auth_headers(config), config.connect_timeout_s)
    engine = config.engine or next((e.engine for e in endpoints if e.engine), None) or "unknown"
    redactor, salt_problem = await redactor_for_run(config, auth_headers(config))
    model = run_id_model(redactor, config.model)
    run_id = make_run_id(model, config.label, engine, config.purpose, datetime.now(UTC))
    try:
        run_dir, run_id = create_run_dir(config.out, run_id)
    except OSError as e:
        print(
            f"soaktop: out = {str(config.out)!r}: cannot create the run directory: {e}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        # Space for the final record first: a disk that fills later still gets its record.
        reserve_space(run_dir)
        (run_dir / "runner.pid").write_text(f"{os.getpid()}\n")
        write_atomic(
            run_dir / "config.json",
            redactor.json_line(
                orjson.dumps(config.public_dict(), option=orjson.OPT_INDENT_2),
                option=orjson.OPT_INDENT_2,
            ),
        )
    except OSError as e:  # before the first request: leave no half run directory
        shutil.rmtree(run_dir, ignore_errors=True)
        print(
            f"soaktop: out = {str(config.out)!r}: cannot start a run there: {storage_words(e)}; "
            f"soaktop needs at least {RESERVE_BYTES // 1024} KiB free for the record. "
            "Nothing was run.",
            file=sys.stderr,
        )
        return EXIT_STORAGE
    hello = orjson.dumps({"run_dir": str(run_dir), "run_id": run_id, "pid": os.getpid()})
    # Unbuffered: if the CLI is already gone (kill -9) nothing is left to fail later, and
    # the run still ends in a record (a demo's: ABORTED by its lifeline).
    with contextlib.suppress(OSError):
        os.write(sys.stdout.fileno(), hello + b"\n")
    _redirect_output(run_dir, redactor)
    clock = {"wall_at_origin": wall_at_origin, "started_at": started_at}
    runner = Runner(
        config, run_dir, run_id, origin_ns, started_at, endpoints, pool, clock, redactor
    )
    runner.early_signals = early
    if salt_problem is not None:
        runner.events.emit(
            "warning", f"--redact: {salt_problem}; pseudonyms hold within this run only", "warning"
        )
    if lifeline_fd is not None:  # a demo's runner: its engine ends with the demo
        watch_lifeline(lifeline_fd, lambda: runner.ask_stop(LIFELINE_GONE, hard=True))
    return await runner.run()


def main() -> int:
    """``python -m soak.run.runner`` with the RunConfig JSON on stdin."""
    from soak.run.config import format_validation_error

    try:
        config = RunConfig.model_validate_json(sys.stdin.buffer.read())
    except ValidationError as e:  # the CLI validated it already: another caller, or a bug
        # Still a sentence per field (never pydantic's dump): it reaches the CLI's stderr.
        print(
            "soaktop runner: the configuration it was given cannot be used:\n"
            + format_validation_error(e),
            file=sys.stderr,
        )
        return EXIT_USAGE
    return eventloop.run(start(config, lifeline_arg(sys.argv[1:])))


if __name__ == "__main__":
    sys.exit(main())
