"""The end of every run, normal or not: summary → verdict → snapshot → hashes → record."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import platform
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from loadgen.stats import PercentileMethod, percentile
from probes.gates import gates_json
from probes.host import fd_soft_limit
from soak import __version__
from soak.judge.coverage import coverage_reasons
from soak.judge.matrix import matrix_reasons
from soak.judge.reconcile import overall, reconcile, reconcile_gates, reconcile_reasons
from soak.judge.thresholds import (
    ThresholdState,
    evaluate,
    metrics_from_record,
    record_source,
    threshold_reasons,
)
from soak.judge.verdict import Findings, decide
from soak.record.faults import faults_from_events
from soak.record.faults import load_start as faults_load_start
from soak.record.journal import JsonlWriter, read_jsonl, release_reserve, sha256_file, storage_words
from soak.record.models import (
    EXIT_STORAGE,
    ClientHealth,
    Identity,
    LoadSummary,
    Reason,
    RunRecord,
    exit_code_for,
    summary_csv,
    write_atomic,
    write_record,
)
from soak.record.summary import LoadTiming, summarize_load
from soak.run.gate_session import gates_from_journal, probe_accounting
from soak.watch.engine import restart_reasons
from soak.watch.gpu.sources import gpu_entries, gpu_source_status
from soak.watch.health import fault_reasons

if TYPE_CHECKING:
    from soak.run.runner import Runner

HASHED_FILES = (
    "config.json",
    "events.jsonl",
    "requests.jsonl",
    "probes.jsonl",
    "snapshots.jsonl",
    "telemetry.jsonl",
)


def run_files(run_dir: Path) -> dict[str, str]:
    """sha256 of every journal and evidence file present (the record's ``files``)."""
    names = [n for n in HASHED_FILES if (run_dir / n).exists()]
    names += sorted(str(p.relative_to(run_dir)) for p in (run_dir / "evidence").glob("*.json"))
    return {name: sha256_file(run_dir / name) for name in names}


def config_sha256(public_config: dict[str, object]) -> str:
    """Hash of the (public) configuration, key order independent."""
    return hashlib.sha256(orjson.dumps(public_config, option=orjson.OPT_SORT_KEYS)).hexdigest()


def build_identity(runner: Runner) -> Identity:
    """The record's identity section."""
    cfg = runner.config
    served = any(cfg.model in {m.get("id") for m in ep.models} for ep in runner.endpoints)
    engine = cfg.engine or next((e.engine for e in runner.endpoints if e.engine), None)
    eps = runner.endpoints
    host: dict[str, object] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        # uvloop or asyncio: part of the client's measured CPU cost per token
        "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    }
    red = runner.redactor
    if cfg.redact:
        eps = [e.model_copy(update={"url": f"<endpoint {i}>"}) for i, e in enumerate(eps)]
    # With --redact the host's pseudonym: runs of one machine stay comparable.
    host["hostname"] = red.learn("host", socket.gethostname())
    identity = Identity(
        model=cfg.model,
        model_served=served,
        engine=engine or "unknown",
        endpoints=eps,
        config_sha256=config_sha256(red.obj(cfg.public_dict())),  # as config.json has it
        prompt_pool=_pool_facts(runner),
        soaktop_version=__version__,
        host=host,
        clock=dict(runner.clock),
        gpus=[g for src in runner.gpu_sources for g in src.identity()],
    )
    return red.model(identity)  # every string: a /version or model id may name paths, hosts


def _pool_facts(runner: Runner) -> dict[str, object]:
    if runner.pool is None:
        return {}
    facts = runner.pool.describe()
    if runner.config.redact:  # the file path is the operator's, not part of the result
        facts["source"] = str(facts["source"]).split(":", 1)[0] + ":<redacted>"
    return facts


def client_health(runner: Runner) -> ClientHealth:
    """Worst-case client figures over the run; loop-lag p99 over the load's ticks."""
    lags = np.sort(np.asarray(runner.lag.samples, dtype=float))
    m = runner.host.client_max
    return ClientHealth(
        loop_lag_p99_s=percentile(lags, 99, "nearest-rank") if lags.size else None,
        loop_lag_max_s=float(lags[-1]) if lags.size else None,
        cpu_percent_max=m.get("cpu_percent_max"),
        rss_mb_max=m.get("rss_mb_max"),
        threads_max=int(m["threads_max"]) if "threads_max" in m else None,
        open_files_max=int(m["open_files_max"]) if "open_files_max" in m else None,
        fd_limit=fd_soft_limit(),
        cpu_over_limit_s=round(runner.host.cpu_streak.longest_s, 3),
        in_flight_short_s=round(runner.host.short_streak.longest_s, 3),
        in_flight_short_min=runner.host.short_min,
    )


def _pause_notes(runner: Runner) -> list[Reason]:
    """A pause is part of the issue window: the throughput figures include it."""
    spans = [p for p in runner.phases if p.name == "paused"]
    if not spans:
        return []
    total = sum((p.end_s or runner.now_s()) - p.start_s for p in spans)
    return [
        Reason(
            code="paused",
            effect="note",
            message=f"the operator paused issuing {len(spans)}× for {total:.1f} s in all: "
            "the issue window and its throughput figures include the pauses",
        )
    ]


def client_vs_server(
    ttft_by_worker: list[tuple[int, float]],
    engines: list[dict[str, Any]],
    method: PercentileMethod,
) -> None:
    """Beside each endpoint's server TTFT estimate, the client's exact TTFT for the same
    endpoint (worker ``i`` uses endpoint ``i % n``) and the gap between them: time the
    server's histogram does not see (HTTP front end, tokenization, queueing before the
    engine, the network, the client). A real vLLM on a CPU showed 13 s against 0.25 s."""
    n = len(engines)
    if not n:
        return
    per: list[list[float]] = [[] for _ in range(n)]
    for worker, ttft in ttft_by_worker:
        per[worker % n].append(ttft)
    for eng, values in zip(engines, per, strict=True):
        client: dict[str, Any] = {"n": len(values), "p50": None, "p99": None}
        if values:
            arr = np.sort(np.asarray(values))
            client |= {q: percentile(arr, int(q[1:]), method) for q in ("p50", "p99")}
        eng["client_ttft_s"] = client
        server = eng.get("server_ttft_s")
        if isinstance(server, dict) and values:
            eng["ttft_gap_s"] = {
                q: client[q] - server[q]
                for q in ("p50", "p99")
                if client[q] is not None and server.get(q) is not None
            }


def _reconciliation(runner: Runner, load: LoadSummary | None) -> dict[str, Any]:
    """Client vs server per window: before gates, load (canaries included), after gates."""
    acc = probe_accounting(runner.run_dir / "probes.jsonl")
    windows: dict[str, dict[str, Any]] = {}
    # A restart inside a window makes it unavailable, at the restart's time.
    restarts = runner.engines.restarts if runner.engines is not None else None
    at = runner.load_start_s()
    if "before" in runner.gate_counters and "before" in acc:
        windows["before"] = reconcile_gates(
            *runner.gate_counters["before"], acc["before"], restarts, at
        )
    if load is not None and load.barrier_released:
        windows["load"] = reconcile(
            runner.counters_before, runner.counters_after, load, acc.get("canary"), restarts, at
        )
    if "after" in runner.gate_counters and "after" in acc:
        windows["after"] = reconcile_gates(
            *runner.gate_counters["after"], acc["after"], restarts, at
        )
    return overall(windows) if windows else {}


def _threshold_reasons(
    runner: Runner, load: LoadSummary | None, final: list[ThresholdState]
) -> list[Reason]:
    """Threshold reasons; when no load was measured (before gates failed, preflight, an
    abort before the barrier) the verdict already says why, and a threshold that had
    nothing to judge is a note, not an INVALID that would hide a server's FAILED."""
    notes: list[Reason] = []
    if load is None or not load.barrier_released:
        notes = [
            Reason(
                code="threshold_not_evaluated",
                effect="note",
                message=f"threshold {st.condition} was not evaluated: no load ran",
            )
            for st in final
            if st.state == "no_data"
        ]
        final = [st for st in final if st.state != "no_data"]
    live, abort = runner.threshold_watch.states, runner.threshold_abort
    return threshold_reasons(final, live, abort) + notes


def finalize_run(runner: Runner, timing: LoadTiming | None) -> int:
    """Write the verdict, the final snapshot and the record. Returns the exit code."""
    cfg = runner.config
    runner.enter("finalize", "computing the summary from the journal")
    ttft_by_worker: list[tuple[int, float]] = []

    def collect(line: dict[str, Any]) -> None:
        if line.get("ok") and line.get("ttft_s") is not None:
            ttft_by_worker.append((int(line["worker"]), float(line["ttft_s"])))

    load = (
        summarize_load(
            runner.run_dir / "requests.jsonl", timing, cfg.percentile_method, visit=collect
        )
        if timing
        else None
    )
    gates, bad_lines = gates_from_journal(runner.run_dir)
    runner.internal_errors += bad_lines
    telemetry: dict[str, Any] = {"engines": runner.engines.summary()} if runner.engines else {}
    if telemetry.get("engines") and load is not None:
        client_vs_server(ttft_by_worker, telemetry["engines"], cfg.percentile_method)
    if runner.faults is not None:
        telemetry |= runner.faults.summary()
    telemetry["host"] = runner.host.summary()
    if runner.gpu_sources:
        telemetry["gpus"] = gpu_entries(runner.gpu_sources, "summary")
        telemetry["gpu_sources"] = gpu_source_status(runner.gpu_sources)
    if coverage := runner.coverage():  # only once a load window opened
        telemetry["coverage"] = coverage
    watch = runner.threshold_watch
    final_thresholds = evaluate(
        watch.thresholds, metrics_from_record(load, telemetry), record_source(load)
    )
    final_thresholds = [  # keep the first live breach beside the final state
        f.model_copy(update={"first_breach_s": live.first_breach_s})
        for f, live in zip(final_thresholds, watch.states or final_thresholds, strict=True)
    ]
    health = client_health(runner)
    reconciliation = _reconciliation(runner, load)
    load_start = faults_load_start(load, runner.matrix)
    status, reasons = decide(
        Findings(
            preflight_errors=runner.preflight_errors,
            load=load,
            aborted=runner.stop_reason_words,
            health=health,
            max_failures=cfg.max_failures,
            max_loop_lag_s=cfg.max_loop_lag_s,
            client_overload_s=cfg.client_overload_s,
            max_client_cpu_percent=cfg.max_client_cpu_percent,
            gates=gates,
            gates_configured=list(cfg.gates),
            before_blocked=runner.before_blocked,
            force_load=cfg.force_load,
            extra=_storage_reasons(runner)
            + [
                Reason(
                    code="internal_error",
                    effect="invalid",
                    message=f"soaktop itself failed ({msg}); see runner.log",
                )
                for msg in runner.internal_errors
            ]
            + fault_reasons(telemetry, load_start, cfg.client_overload_s)
            + coverage_reasons(telemetry, cfg.require_telemetry)
            + restart_reasons(telemetry, load_start)
            + [r for src in runner.gpu_sources for r in src.fault_reasons()]
            + _threshold_reasons(runner, load, final_thresholds)
            + reconcile_reasons(reconciliation, cfg.reconcile == "strict")
            + _pause_notes(runner)
            + (
                matrix_reasons(runner.matrix, cfg.max_failures, runner.stop_asked is not None)
                if runner.matrix is not None
                else []
            ),
        )
    )
    runner.enter("done", f"verdict {status.value}")
    runner.events.emit(
        "verdict",
        f"{status.value}: " + ("; ".join(r.message for r in reasons) or "all checks held"),
        "info" if status.value == "PASSED" else "error",
        status=status.value,
    )
    runner.phases[-1].end_s = runner.now_s()
    runner.write_snapshot(status=status.value, reasons=reasons)
    writers = (runner.events.writer, runner.requests, runner.snapshots, runner.telemetry)
    for writer in writers:
        writer.close()
    if runner.storage_error is not None:
        dropped = {w.path.name: w.dropped for w in (*writers, _probe_journal(runner)) if w}
        reasons = storage_reasons_after(reasons, runner.storage_error, dropped)
    faults = faults_from_events(read_jsonl(runner.run_dir / "events.jsonl"), load_start)
    record = RunRecord(
        run_id=runner.run_id,
        status=status,
        reasons=reasons,
        exit_code=exit_code_for(status, reasons),
        config=cfg.public_dict(),
        identity=build_identity(runner),
        load=load,
        matrix=runner.matrix,
        gates=gates_json(gates),
        thresholds=[t.model_dump(mode="json") for t in final_thresholds],
        telemetry=telemetry,
        reconciliation=reconciliation,
        faults=faults,
        client_health=health,
        phases=runner.phases,
        started_at=runner.started_at,
        ended_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        files=run_files(runner.run_dir),
    )
    # The last pass over everything the record gathered (a reason quoting a server's words).
    return write_final(runner.run_dir, runner.redactor.model(record))


def write_final(run_dir: Path, record: RunRecord) -> int:
    """Write summary.csv, then record.json, into the space the run held for them.

    The reserve (``soak.record.journal.reserve_space``) is freed first. summary.csv goes first so
    that the record — what every reader trusts — can say when it could not be written
    (its exit code then says "storage"). If the record does not fit, a smaller one without
    the telemetry and matrix sections is tried, and says so; if nothing fits, the exit
    code says "storage" and ``soaktop recover`` can write the record from the journals
    once there is space. Returns the exit code.
    """
    release_reserve(run_dir)
    try:
        write_atomic(run_dir / "summary.csv", summary_csv(record))
    except OSError as e:
        _log(f"summary.csv: {storage_words(e)}")
        record = _with_reason(
            record,
            Reason(
                code="storage_error",
                effect="note",
                message=f"summary.csv could not be written ({storage_words(e)}); the record "
                "holds every figure (exit 5)",
            ),
        )
    try:
        write_record(run_dir, record)
    except OSError as e:
        _log(f"record.json: {storage_words(e)}")
        small = _with_reason(
            record,
            Reason(
                code="record_truncated",
                effect="note",
                message=f"the full record did not fit on the disk ({storage_words(e)}): its "
                "telemetry and matrix sections were left out; the journals hold them",
            ),
            telemetry={},
            matrix=None,
        )
        try:
            write_record(run_dir, small)
        except OSError:
            return EXIT_STORAGE
        record = small
    return record.exit_code


def _with_reason(record: RunRecord, reason: Reason, **update: Any) -> RunRecord:
    """``record`` with one more reason (and its exit code recomputed)."""
    reasons = [*record.reasons, reason]
    return record.model_copy(
        update={**update, "reasons": reasons, "exit_code": exit_code_for(record.status, reasons)}
    )


def _log(message: str) -> None:
    """A line for runner.log, which shares the failing disk (a failed print is dropped)."""
    with contextlib.suppress(OSError):
        print(f"soaktop runner: {message}", file=sys.stderr, flush=True)


def _probe_journal(runner: Runner) -> JsonlWriter | None:
    return runner.gates.journal if runner.gates is not None else None


def _storage_reasons(runner: Runner) -> list[Reason]:
    if runner.storage_error is None:
        return []
    return [
        Reason(
            code="storage_error",
            effect="aborted",
            message=f"the run directory could not be written: {runner.storage_error}; issuing "
            "stopped and in-flight requests were cut (exit 5)",
        )
    ]


def storage_reasons_after(
    reasons: list[Reason], storage_error: str, dropped: dict[str, int]
) -> list[Reason]:
    """The verdict's reasons once the journals are closed, when a write failed: the
    storage reason names the lines lost after it. A failure that came only after the
    verdict (the last snapshot, an fsync at close) adds a note: the figures are whole, so
    the verdict stands, and the exit code still says "storage" (5)."""
    if not any(r.code == "storage_error" for r in reasons):
        reasons = [
            *reasons,
            Reason(
                code="storage_error",
                effect="note",
                message="the run directory could not be written while the record was made: "
                f"{storage_error}; the record's figures are complete (exit 5)",
            ),
        ]
    return [_with_dropped(r, dropped) for r in reasons]


def _with_dropped(reason: Reason, dropped: dict[str, int]) -> Reason:
    """The storage reason with the journal lines that were lost after the error."""
    lost = {name: n for name, n in dropped.items() if n}
    if reason.code != "storage_error" or not lost:
        return reason
    words = ", ".join(f"{n} line{'s' * (n != 1)} of {name}" for name, n in lost.items())
    return reason.model_copy(update={"message": f"{reason.message}; not written: {words}"})
