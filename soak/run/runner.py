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
import shutil
import signal
import sys
import time
import traceback
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import orjson
from pydantic import ValidationError

from loadgen import eventloop, tls
from loadgen.headers import run_headers, secret_values
from loadgen.live import LiveLoadStats, SecondsFold
from loadgen.prompts import PromptPool, PromptPoolError, load_file
from probes.host import LoopLagMonitor
from soak.judge.coverage import LoadWindow
from soak.judge.thresholds import ThresholdWatch, parse_thresholds
from soak.record.events import EventLog
from soak.record.journal import (
    RESERVE_BYTES,
    DropWriteErrors,
    JsonlWriter,
    reserve_space,
    storage_words,
)
from soak.record.models import EXIT_STORAGE, EXIT_USAGE, EndpointIdentity, write_atomic
from soak.record.redact import Redactor
from soak.run.config import RunConfig
from soak.run.fd_limit import fd_problem
from soak.run.finalize import finalize_run
from soak.run.identity import probe_all
from soak.run.metrics_export import (
    MetricsExport,
    MetricsExportError,
    exposure_warning,
    start_export,
)
from soak.run.protocol import RunProtocol
from soak.run.redaction import RedactingStream, RedactingWriter, redactor_for_run, run_id_model
from soak.run.request_sink import RequestSink
from soak.run.runid import create_run_dir, make_run_id
from soak.run.snapshots import SnapshotTick, now_iso
from soak.run.spawn import LIFELINE_GONE, lifeline_arg, watch_lifeline
from soak.run.state import Journals, RunParts, RunState, Watchers
from soak.run.steady_load import load_timing
from soak.run.stops import RunControls
from soak.run.telemetry import stop_watchers
from soak.run.timeline import LiveJudge
from soak.run.warmup import WarmupClock, parse_warmup
from soak.run.window_tick import WindowTick
from soak.watch.host import HostWatch


def auth_headers(config: RunConfig) -> dict[str, str]:
    """Authorization from the environment variable named in the config, and the
    ``--header`` headers (loadgen.headers): sent on every request, never written."""
    return run_headers(config.headers, config.api_key_env, os.environ)


class Runner:
    """The composition root of one run: builds the state and its parts, wires the stops,
    runs the protocol with the snapshot tick beside it, and always finalizes."""

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
        secrets = secret_values(config.headers, auth_headers(config))
        redactor = redactor or Redactor(config.endpoints, config.redact, secrets)
        # Every journal line passes the redactor (requests: see RequestSink, the hot path).
        journal = partial(RedactingWriter, redactor=redactor) if redactor.active else JsonlWriter
        # The journals report a full disk to the controls, which act on the state, whose
        # event log is the first journal: the controls get their state once it exists.
        failed: list[RunControls] = []

        def fail(writer: JsonlWriter, err: OSError) -> None:
            failed[0].journal_failed(writer, err)

        events = EventLog(journal(run_dir / "events.jsonl", on_error=fail), origin_ns, redactor)
        self.state = state = RunState(
            config, run_dir, run_id, origin_ns, started_at, endpoints, pool, clock, redactor, events
        )
        self.controls = RunControls(state, run_dir)
        failed.append(self.controls)
        journals = Journals(
            requests=JsonlWriter(run_dir / "requests.jsonl", fail),
            snapshots=journal(run_dir / "snapshots.jsonl", on_error=fail),
            telemetry=journal(run_dir / "telemetry.jsonl", on_error=fail),
            windows=journal(run_dir / "windows.jsonl", on_error=fail),
        )
        window = LoadWindow()
        host = HostWatch(
            journals.telemetry,
            events,
            config.server_pid,
            config.max_client_cpu_percent,
            interval_s=config.snapshot_interval_s,
            window=window,
        )
        self.parts = RunParts(
            state=state,
            journals=journals,
            watchers=Watchers(host=host),
            live=LiveLoadStats(config.window_s, config.mix.names if config.mix else ()),
            lag=LoopLagMonitor(),
            window=window,
            threshold_watch=ThresholdWatch(
                parse_thresholds(config.thresholds, gpu_telemetry=config.gpu_telemetry)
            ),
        )
        if config.warmup is not None:
            state.warmup = WarmupClock(parse_warmup(config.warmup))
        self.sink = RequestSink(state, journals.requests, self.parts.live)
        windows = WindowTick(state, SecondsFold(self.parts.live), journals.windows)
        windows.judge = LiveJudge(
            config.public_dict(),
            self.parts.threshold_watch.thresholds,
            windows.warmup_info,
            state.load_start_s,
        )
        self.tick = SnapshotTick(self.parts, self.sink, windows)
        self.early_signals: list[int] = []

    async def run(self) -> int:
        """Run the protocol; always ends with a written record. Returns the exit code."""
        st, parts, controls = self.state, self.parts, self.controls
        loop = controls.loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, controls.on_signal, sig)
        for early in self.early_signals:  # arrived before the handlers above existed
            controls.on_signal(early)
        parts.lag.start()
        ticker = asyncio.create_task(self.tick.loop(controls))
        headers = auth_headers(st.config)
        try:
            await RunProtocol(parts, self.sink, controls, headers).run()
        except Exception as e:  # a bug or an unexpected answer must still end in a record
            traceback.print_exc()  # into runner.log
            st.internal_errors.append(f"{type(e).__name__}: {e}"[:300])
            if st.gen is not None:
                st.gen.abort()
                await asyncio.gather(*st.gen.tasks, return_exceptions=True)
        finally:
            parts.window.close(st.now_s())  # an internal error mid-load ends it here
            ticker.cancel()
            parts.lag.stop()
            await stop_watchers(parts)
        return finalize_run(parts, self.tick, load_timing(st))


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
    started_at = now_iso()
    wall_at_origin = time.time()
    pool: PromptPool | None = None
    if config.prompts is not None:
        try:
            pool = load_file(config.prompts, seed=config.pool_seed, limit=config.pool_size)
        except PromptPoolError as e:
            print(f"soaktop: prompts: {e}", file=sys.stderr)
            return EXIT_USAGE
    try:  # before a server is asked anything: a port in use is a usage error
        export = start_export(config.metrics_host, config.metrics_port)
    except MetricsExportError as e:
        print(f"soaktop: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:  # the certificates are read once, before any request (loadgen.tls)
        tls.configure(tls.TlsFiles.of(config))
    except tls.TlsError as e:
        print(f"soaktop: {e}", file=sys.stderr)
        return EXIT_USAGE
    fds = fd_problem(config)  # before any request: a hard limit the streams cannot fit in
    if fds is not None:
        print(f"soaktop: {fds}", file=sys.stderr)
        return EXIT_USAGE
    endpoints = await probe_all(
        config.endpoints, auth_headers(config), config.connect_timeout_s, config.engine
    )
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
        runner.state.events.emit(
            "warning", f"--redact: {salt_problem}; pseudonyms hold within this run only", "warning"
        )
    if lifeline_fd is not None:  # a demo's runner: its engine ends with the demo
        watch_lifeline(lifeline_fd, lambda: runner.controls.ask_stop(LIFELINE_GONE, hard=True))
    return await _run_exporting(runner, export)


async def _run_exporting(runner: Runner, export: MetricsExport | None) -> int:
    """The run, each snapshot published to the metrics endpoint (if any) until it ends."""
    if export is None:
        return await runner.run()
    runner.tick.listeners.append(export.publish)
    if (warning := exposure_warning(export.host, export.port)) is not None:
        runner.state.events.emit("warning", warning, "warning")
    try:
        return await runner.run()
    finally:
        export.stop()


def main() -> int:
    """``python -m soak.run.runner`` with the RunConfig JSON on stdin."""
    from soak.run.config_words import format_validation_error

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
