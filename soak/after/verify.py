"""``soaktop verify RUN_DIR``: does the record agree with the journals it was made from?

Checks each journal's and evidence file's sha256 against ``record.files``, recomputes the
load summary from ``requests.jsonl`` and the gates from ``probes.jsonl`` with the same
functions the runner used, and the verdict reasons that follow from them. Exit 0 when everything
agrees, 1 with the list of differences otherwise.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from probes.gates import SuiteGate, gates_json
from soak.judge.coverage import coverage_problems, coverage_reasons
from soak.judge.matrix import matrix_reasons
from soak.judge.reconcile import reconcile_reasons
from soak.judge.thresholds import (
    ThresholdError,
    evaluate,
    metrics_from_record,
    parse_thresholds,
    record_source,
)
from soak.judge.verdict import Findings, decide, status_of
from soak.record.faults import faults_from_events
from soak.record.faults import load_start as faults_load_start
from soak.record.journal import read_jsonl, sha256_file
from soak.record.models import LoadSummary, RunRecord, Status, exit_code_for
from soak.record.run_dir import RunDirError, journal_problems, load_run_record
from soak.record.summary import LoadTiming, summarize_load
from soak.run.finalize import HASHED_FILES
from soak.run.gate_session import gates_from_journal
from soak.run.matrix_run import matrix_from_journal
from soak.watch.engine import restart_reasons
from soak.watch.health import fault_reasons


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff(f"{path}.{k}", a.get(k), b.get(k), out)
    elif isinstance(a, float) and isinstance(b, float):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: record {a!r}, journal {b!r}")
    elif a != b:
        out.append(f"{path}: record {a!r}, journal {b!r}")


def verify_run(run_dir: Path) -> list[str]:
    """Differences between the record and the journals (empty: they agree).

    Raises :class:`~soak.record.run_dir.RunDirError` when there is nothing to compare: not a
    run directory, no record, a damaged record, or journal lines of the wrong shape.
    """
    rec = load_run_record(run_dir)
    # Damage the record already owns up to (recover notes it) is agreement, not a finding.
    noted = {r.message for r in rec.reasons if r.code == "journal_damaged"}
    problems = [p for p in journal_problems(run_dir) if p not in noted]
    try:
        return problems + _differences(run_dir, rec)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # A line that parses as JSON but holds the wrong types (a hand edit, a disk
        # error): the journals cannot be recomputed, so nothing can be said to agree.
        raise RunDirError(
            f"{run_dir}: the journals cannot be recomputed ({type(e).__name__}: {e}); "
            + ("; ".join(problems) or "a journal line holds values of the wrong type")
        ) from None


def _differences(run_dir: Path, rec: RunRecord) -> list[str]:
    problems: list[str] = []
    for name in HASHED_FILES:
        if (run_dir / name).exists() and name not in rec.files:
            problems.append(f"{name} is in the run directory but the record holds no hash of it")
    for name, digest in rec.files.items():
        path = run_dir / name
        if not path.exists():
            problems.append(f"{name}: missing (record has sha256 {digest[:12]}…)")
        elif (actual := sha256_file(path)) != digest:
            problems.append(
                f"{name}: sha256 {actual[:12]}… differs from the record's {digest[:12]}…"
            )
    again = None
    if rec.load is not None:
        method = rec.config.get("percentile_method", "nearest-rank")
        again = summarize_load(
            run_dir / "requests.jsonl", LoadTiming.from_summary(rec.load), method
        )
        _diff("load", rec.load.model_dump(mode="json"), again.model_dump(mode="json"), problems)
    elif rec.matrix is not None:
        again_matrix = matrix_from_journal(run_dir, rec.matrix)
        _diff(
            "matrix",
            rec.matrix.model_dump(mode="json"),
            again_matrix.model_dump(mode="json"),
            problems,
        )
    elif any(True for _ in read_jsonl(run_dir / "requests.jsonl")):
        problems.append("requests.jsonl holds requests but the record has no load summary")
    gates, bad_lines = gates_from_journal(run_dir)
    problems += bad_lines
    _diff("gates", rec.gates, gates_json(gates), problems)
    _check_evidence(run_dir, rec, problems)
    faults = faults_from_events(
        read_jsonl(run_dir / "events.jsonl"), faults_load_start(again, rec.matrix)
    )
    _diff("faults", {"faults": rec.faults}, {"faults": faults}, problems)
    _check_thresholds(rec, again, problems)
    problems += coverage_problems(rec.telemetry)
    _check_verdict(rec, again, gates, problems)
    implied = status_of(rec.reasons)
    if rec.status is not implied:
        problems.append(f"status: record {rec.status.value}, its reasons imply {implied.value}")
    if rec.exit_code != exit_code_for(rec.status, rec.reasons):
        problems.append(
            f"exit_code: record {rec.exit_code}, the verdict implies "
            f"{exit_code_for(rec.status, rec.reasons)}"
        )
    return problems


# Reasons that follow from the journals, the config and the telemetry summary alone
# (recomputable here); their messages must match word for word.
_DERIVED = {
    "barrier_not_reached",
    "load_failures",
    "no_completed_requests",
    "usage_missing",
    "usage_disagrees",
    "empty_answers",
    "stale_connection_retries",
    "drain_deadline",
    "backoff",
    "cancelled",
    "worker_errors",
    "counters_inconsistent",
    "client_overloaded",
    "client_cpu_overloaded",
    "in_flight_short",
    "load_clean",
    "gate_failed",
    "gate_client_error",
    "gate_cut_short",
    "gate_passed_on_retry",
    "before_gates_failed",
    "force_load",
    "server_fault",
    "server_log_error",
    "health_outage",
    "health_slow",
    "health_client_error",
    "telemetry_lost",
    "telemetry_missing",
    "reconcile_mismatch",
    "server_restart",
    "matrix_failures",
    "matrix_clean",
    "matrix_cut_short",
    "matrix_barrier_not_reached",
}


def _check_evidence(run_dir: Path, rec: RunRecord, problems: list[str]) -> None:
    """Every evidence file is hashed, and every one a probe names exists."""
    for evidence in sorted((run_dir / "evidence").glob("*.json")):
        rel = str(evidence.relative_to(run_dir))
        if rel not in rec.files:
            problems.append(f"{rel} is in the run directory but the record holds no hash of it")
    for line in read_jsonl(run_dir / "probes.jsonl"):
        ref = line.get("evidence")
        if ref and not (run_dir / ref).exists():
            problems.append(f"probe {line.get('request_id')} names {ref}, which is missing")


def _check_thresholds(rec: RunRecord, again: LoadSummary | None, problems: list[str]) -> None:
    """The final threshold states, recomputed from the config and the record's figures."""
    try:
        thresholds = parse_thresholds(
            list(rec.config.get("thresholds") or []),
            gpu_telemetry=bool(rec.config.get("nvml", True) or rec.config.get("dcgm")),
        )
    except ThresholdError as e:
        problems.append(f"config.thresholds cannot be parsed: {e}")
        return
    states = evaluate(thresholds, metrics_from_record(again, rec.telemetry), record_source(again))
    mine = {s.expr: (s.state, s.observed) for s in states}
    theirs = {t.get("expr"): (t.get("state"), t.get("observed")) for t in rec.thresholds}
    if mine != theirs:
        problems.append(f"thresholds: record {theirs}, recomputed {mine}")


def _check_verdict(
    rec: RunRecord,
    again: LoadSummary | None,
    gates: dict[str, dict[str, SuiteGate]],
    problems: list[str],
) -> None:
    cfg = rec.config
    load_start = faults_load_start(again, rec.matrix)
    force = bool(cfg.get("force_load"))
    before_failed = any(g.failures for g in gates.get("before", {}).values())
    _, reasons = decide(
        Findings(
            load=again,
            aborted="(as recorded)" if rec.status is Status.ABORTED else None,
            health=rec.client_health,
            max_failures=int(cfg.get("max_failures", 0)),
            max_loop_lag_s=float(cfg.get("max_loop_lag_s", 0.5)),
            client_overload_s=float(cfg.get("client_overload_s", 10.0)),
            max_client_cpu_percent=float(cfg.get("max_client_cpu_percent", 95.0)),
            gates=gates,
            gates_configured=list(cfg.get("gates") or []),
            before_blocked=before_failed and not force and again is None,
            force_load=force,
            extra=fault_reasons(
                rec.telemetry, load_start, float(cfg.get("client_overload_s", 10.0))
            )
            + coverage_reasons(rec.telemetry, list(cfg.get("require_telemetry") or []))
            + restart_reasons(rec.telemetry, load_start)
            + reconcile_reasons(rec.reconciliation, cfg.get("reconcile") == "strict")
            + (
                matrix_reasons(
                    rec.matrix, int(cfg.get("max_failures", 0)), rec.status is Status.ABORTED
                )
                if rec.matrix is not None
                else []
            ),
        )
    )
    want = Counter((r.code, r.message) for r in reasons if r.code in _DERIVED)
    have = Counter((r.code, r.message) for r in rec.reasons if r.code in _DERIVED)
    for code, msg in sorted((want - have).elements()):
        problems.append(f"reasons: the journals imply {code!r} ({msg}), the record does not say it")
    for code, msg in sorted((have - want).elements()):
        problems.append(f"reasons: the record says {code!r} ({msg}), the journals do not")
