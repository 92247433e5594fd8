"""The end of every run, normal or not: summary → verdict → snapshot → hashes → record."""

from __future__ import annotations

import contextlib
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.live import behind_health
from loadgen.stats import PercentileMethod, percentile
from probes.host import fd_soft_limit
from soak.judge.config_caveats import config_caveats
from soak.judge.facts import RunFacts
from soak.judge.faults import gpu_fault_events
from soak.judge.limits import limits_from_config
from soak.judge.load_pass import LoadFigures, load_figures
from soak.judge.reconcile import overall, reconcile, reconcile_gates
from soak.judge.verdict import judge
from soak.record.endurance import Endurance, WindowFigures
from soak.record.faults import faults_from_events, load_start
from soak.record.journal import JsonlWriter, read_jsonl, release_reserve, sha256_file, storage_words
from soak.record.journal_lines import read_events
from soak.record.models import (
    EXIT_STORAGE,
    ClientHealth,
    LoadSummary,
    Reason,
    RunRecord,
    exit_code_for,
    write_atomic,
    write_record,
)
from soak.record.sections import Fault, Reconciliation
from soak.record.step_figures import StepCounts
from soak.record.summary import LoadTiming, warmup_accounting
from soak.record.summary_csv import summary_csv
from soak.record.telemetry import RecordTelemetry
from soak.run.gate_session import gates_from_journal, probe_accounting
from soak.run.identity import build_identity
from soak.run.shards import record_shards
from soak.run.snapshots import SnapshotTick
from soak.run.state import RunParts
from soak.run.timeline import WARMUP_OUTLASTED, judged_timeline, not_judged, timeline_inputs
from soak.watch.gpu.sources import gpu_entries, gpu_source_status

HASHED_FILES = (
    "config.json",
    "events.jsonl",
    "requests.jsonl",
    "probes.jsonl",
    "snapshots.jsonl",
    "telemetry.jsonl",
    "windows.jsonl",
)


def run_files(run_dir: Path) -> dict[str, str]:
    """sha256 of every journal and evidence file present (the record's ``files``)."""
    names = [n for n in HASHED_FILES if (run_dir / n).exists()]
    names += sorted(str(p.relative_to(run_dir)) for p in (run_dir / "evidence").glob("*.json"))
    return {name: sha256_file(run_dir / name) for name in names}


def client_health(parts: RunParts) -> ClientHealth:
    """Worst-case client figures over the run; loop-lag p99 over the load's ticks."""
    lags = np.sort(np.asarray(parts.lag.samples, dtype=float))
    m = parts.watchers.host.client_max
    return ClientHealth(
        loop_lag_p99_s=percentile(lags, 99, "nearest-rank") if lags.size else None,
        loop_lag_max_s=float(lags[-1]) if lags.size else None,
        cpu_percent_max=m.get("cpu_percent_max"),
        rss_mb_max=m.get("rss_mb_max"),
        threads_max=int(m["threads_max"]) if "threads_max" in m else None,
        open_files_max=int(m["open_files_max"]) if "open_files_max" in m else None,
        fd_limit=fd_soft_limit(),
        cpu_over_limit_s=round(parts.watchers.host.cpu_streak.longest_s, 3),
        in_flight_short_s=round(parts.watchers.host.short_streak.longest_s, 3),
        in_flight_short_min=parts.watchers.host.short_min,
        **behind_health(parts.live),
    )


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


def _reconciliation(parts: RunParts, load: LoadSummary | None) -> dict[str, Any]:
    """Client vs server per window: before gates, load (canaries included), after gates."""
    acc = probe_accounting(parts.state.run_dir / "probes.jsonl")
    windows: dict[str, dict[str, Any]] = {}
    # A restart inside a window makes it unavailable, at the restart's time.
    restarts = parts.watchers.engines.restarts if parts.watchers.engines is not None else None
    at = parts.state.load_start_s()
    if "before" in parts.state.gate_counters and "before" in acc:
        windows["before"] = reconcile_gates(
            *parts.state.gate_counters["before"], acc["before"], restarts, at
        )
    if load is not None and load.barrier_released:
        windows["load"] = reconcile(
            parts.state.counters_before,
            parts.state.counters_after,
            load,
            acc.get("canary"),
            restarts,
            at,
            warmup_accounting(parts.state.run_dir / "requests.jsonl")
            if parts.state.config.warmup
            else None,
        )
    if "after" in parts.state.gate_counters and "after" in acc:
        windows["after"] = reconcile_gates(
            *parts.state.gate_counters["after"], acc["after"], restarts, at
        )
    return overall(windows) if windows else {}


def gather_facts(
    parts: RunParts,
    figures: LoadFigures | None,
    ttft_by_worker: list[tuple[int, float]],
    endurance: Endurance | None = None,
) -> RunFacts:
    """The run's facts, from the live run: the one place finalize reads the run's state,
    its watchers and its journals (recover and verify gather the same facts from the run
    directory, :mod:`soak.after.journal_facts`). ``figures`` are the load's and its
    slices' (:func:`journal_figures`; None: no load ran)."""
    st, w, cfg = parts.state, parts.watchers, parts.state.config
    load = figures.load if figures is not None else None
    gates, bad_lines = gates_from_journal(st.run_dir)
    events = read_jsonl(st.run_dir / "events.jsonl")  # unbuffered: every line is there
    return RunFacts(
        **limits_from_config(cfg.public_dict()),
        preflight_errors=list(st.preflight_errors),
        aborted=st.stop_reason_words,
        stopped=st.stop_asked is not None,
        storage_error=st.storage_error,
        internal_errors=st.internal_errors + bad_lines,
        phases=st.phases,
        now_s=st.now_s(),
        load=load,
        matrix=st.matrix,
        health=client_health(parts),
        gates=gates,
        gates_configured=list(cfg.gates),
        before_blocked=st.before_blocked,
        force_load=cfg.force_load,
        telemetry=_telemetry(parts, load, ttft_by_worker),
        gpu_fault_events=gpu_fault_events(events) if w.gpu_sources else [],
        reconciliation=_reconciliation(parts, load),
        thresholds=parts.threshold_watch.thresholds,
        threshold_live=parts.threshold_watch.states,
        threshold_abort=st.threshold_abort,
        endurance=endurance,
        steps=figures.steps if figures is not None else (),
        classes=figures.classes if figures is not None else (),
        shards=record_shards(st.gen),
    )


def journal_figures(
    parts: RunParts, timing: LoadTiming | None
) -> tuple[LoadFigures | None, list[tuple[int, float]]]:
    """The load's figures and all its slices' (steps, a mix's classes, a conversation's
    turns) from one read of requests.jsonl, and each successful request's TTFT by worker
    (None and nothing: no load ran)."""
    ttft_by_worker: list[tuple[int, float]] = []

    def collect(line: dict[str, Any]) -> None:
        if line.get("ok") and line.get("ttft_s") is not None:
            ttft_by_worker.append((int(line["worker"]), float(line["ttft_s"])))

    if timing is None:
        return None, ttft_by_worker
    st = parts.state
    steps = st.steps
    counts = st.step_counts or [StepCounts() for _ in steps]
    figures = load_figures(
        st.run_dir / "requests.jsonl",
        timing,
        st.config.public_dict(),
        st.config.percentile_method,
        steps=steps,
        counts=counts,
        visit=collect,
    )
    return figures, ttft_by_worker


def _telemetry(
    parts: RunParts, load: LoadSummary | None, ttft_by_worker: list[tuple[int, float]]
) -> dict[str, Any]:
    """The record's ``telemetry``: every watcher's summary, and the load's coverage."""
    w, method = parts.watchers, parts.state.config.percentile_method
    telemetry: dict[str, Any] = {"engines": w.engines.summary()} if w.engines else {}
    if telemetry.get("engines") and load is not None:
        client_vs_server(ttft_by_worker, telemetry["engines"], method)
    if w.faults is not None:
        telemetry |= w.faults.summary()
    telemetry["host"] = w.host.summary()
    if w.gpu_sources:
        telemetry["gpus"] = gpu_entries(w.gpu_sources, "summary")
        telemetry["gpu_sources"] = gpu_source_status(w.gpu_sources)
    if coverage := w.coverage(parts.state.now_s()):  # only once a load window opened
        telemetry["coverage"] = coverage
    return telemetry


def timeline(
    parts: RunParts, tick: SnapshotTick, timing: LoadTiming | None
) -> tuple[list[WindowFigures], Endurance | None]:
    """The record's window series and endurance judgement, from the journals (None: the
    run had no steady load to cut into windows)."""
    st = parts.state
    tick.windows.flush(st.now_s())
    if timing is None or not timing.barrier_released:
        return [], None
    config = st.config.public_dict()
    events = read_events(st.run_dir / "events.jsonl")
    inputs = timeline_inputs(timing, config, events, parts.threshold_watch.thresholds, st.now_s())
    if inputs is None:
        return [], not_judged(config, WARMUP_OUTLASTED, tick.windows.warmup_info())
    try:
        return judged_timeline(st.run_dir, inputs, events, st.config.percentile_method)
    except Exception as e:  # a bug here must not cost the run its record
        traceback.print_exc()
        st.internal_errors.append(f"the window series: {type(e).__name__}: {e}"[:300])
        return [], None


def finalize_run(parts: RunParts, tick: SnapshotTick, timing: LoadTiming | None) -> int:
    """Write the verdict, the final snapshot and the record. Returns the exit code."""
    st = parts.state
    st.enter("finalize", "computing the summary from the journal")
    windows, endurance = timeline(parts, tick, timing)
    # One read of requests.jsonl: the load, each step (a sweep's knee), class and turn.
    figures, ttft_by_worker = journal_figures(parts, timing)
    facts = gather_facts(parts, figures, ttft_by_worker, endurance)
    verdict = judge(facts)
    status = verdict.status
    st.enter("done", f"verdict {status.value}")
    st.events.emit(
        "verdict",
        f"{status.value}: " + ("; ".join(r.message for r in verdict.reasons) or "all checks held"),
        "info" if status.value == "PASSED" else "error",
        status=status.value,
    )
    st.phases[-1].end_s = st.now_s()
    if endurance is not None:  # the last snapshot shows the record's judgement
        tick.windows.final_view(endurance, verdict.thresholds)
    tick.write(status=status.value, reasons=verdict.reasons)
    reasons = _close_journals(parts, verdict.reasons)
    faults = faults_from_events(
        read_jsonl(st.run_dir / "events.jsonl"), load_start(facts.load, facts.matrix)
    )
    config, identity = st.config.public_dict(), build_identity(st, parts.watchers)
    telemetry = RecordTelemetry.model_validate(facts.telemetry)
    record = RunRecord(
        run_id=st.run_id,
        status=status,
        reasons=reasons,
        exit_code=exit_code_for(status, reasons),
        config=config,
        identity=identity,
        load=facts.load,
        matrix=facts.matrix,
        gates=facts.gates,
        thresholds=verdict.thresholds,
        telemetry=telemetry,
        reconciliation=Reconciliation.model_validate(facts.reconciliation),
        faults=[Fault.model_validate(f) for f in faults],
        client_health=facts.health if facts.health is not None else ClientHealth(),
        windows=windows,
        caveats=config_caveats(config, facts.load, identity, telemetry, facts.matrix),
        endurance=endurance,
        phases=st.phases,
        started_at=st.started_at,
        ended_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        files=run_files(st.run_dir),
        **(figures.sections() if figures is not None else {}),  # each only if the load has it
    )
    if facts.shards:  # --shards only: absent from a run in one process
        record.shards = list(facts.shards)
    # The last pass over everything the record gathered (a reason quoting a server's words).
    return write_final(st.run_dir, st.redactor.model(record))


def _close_journals(parts: RunParts, reasons: list[Reason]) -> list[Reason]:
    """Close every journal; after a write failure, the reasons name the lines lost."""
    st = parts.state
    writers = parts.journals.all(st.events)
    for writer in writers:
        writer.close()
    if st.storage_error is None:
        return reasons
    dropped = {w.path.name: w.dropped for w in (*writers, _probe_journal(parts)) if w}
    return storage_reasons_after(reasons, st.storage_error, dropped)


def write_final(run_dir: Path, record: RunRecord) -> int:
    """Write summary.csv, then record.json, into the space the run held for them.

    The reserve (``soak.record.journal.reserve_space``) is freed first. summary.csv goes first so
    that the record — what every reader trusts — can say when it could not be written
    (its exit code then says "storage"). If the record does not fit, a smaller one without
    the telemetry, matrix and window-series sections is tried, and says so; if nothing
    fits, the exit code says "storage" and ``soaktop recover`` can write the record from
    the journals once there is space. Returns the exit code.
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
                "telemetry, matrix and window-series sections were left out; the journals "
                "hold them",
            ),
            telemetry=RecordTelemetry(),
            matrix=None,
            windows=[],
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


def _probe_journal(parts: RunParts) -> JsonlWriter | None:
    return parts.gates.journal if parts.gates is not None else None


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
