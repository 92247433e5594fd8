"""``soaktop verify RUN_DIR``: does the record agree with the journals it was made from?

Checks each journal's and evidence file's sha256 against ``record.files``, recomputes the
load summary from ``requests.jsonl`` and the gates from ``probes.jsonl`` with the same
functions the runner used, and the verdict reasons that follow from them. Exit 0 when everything
agrees, 1 with the list of differences otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from soak.finalize import HASHED_FILES
from soak.gate_session import gates_from_journal
from soak.journal import read_jsonl, sha256_file
from soak.record import EXIT_CODES, LoadSummary, RunRecord, Status, load_record
from soak.summary import LoadTiming, summarize_load
from soak.verdict import Findings, decide, status_of


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
    """Differences between the record and the journals (empty: they agree)."""
    try:
        rec = load_record(run_dir)
    except FileNotFoundError:
        return [f"{run_dir}: no record.json (a runner that died? try: soaktop recover {run_dir})"]
    except ValidationError as e:
        return [f"record.json does not match the schema: {e}"]
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
    if rec.load is not None:
        method = rec.config.get("percentile_method", "nearest-rank")
        again = summarize_load(
            run_dir / "requests.jsonl", LoadTiming.from_summary(rec.load), method
        )
        _diff("load", rec.load.model_dump(mode="json"), again.model_dump(mode="json"), problems)
        _check_verdict(run_dir, rec, again, problems)
    elif any(True for _ in read_jsonl(run_dir / "requests.jsonl")):
        problems.append("requests.jsonl holds requests but the record has no load summary")
    gates = {
        p: {k: g.model_dump(mode="json") for k, g in su.items()}
        for p, su in gates_from_journal(run_dir / "probes.jsonl").items()
    }
    _diff("gates", rec.gates, gates, problems)
    for evidence in sorted((run_dir / "evidence").glob("*.json")):
        rel = str(evidence.relative_to(run_dir))
        if rel not in rec.files:
            problems.append(f"{rel} is in the run directory but the record holds no hash of it")
    implied = status_of(rec.reasons)
    if rec.status is not implied:
        problems.append(f"status: record {rec.status.value}, its reasons imply {implied.value}")
    if rec.exit_code != EXIT_CODES[rec.status]:
        problems.append(
            f"exit_code: record {rec.exit_code}, status implies {EXIT_CODES[rec.status]}"
        )
    return problems


# Reasons that follow from the load journal and client health alone (recomputable here).
_DERIVED = {
    "barrier_not_reached",
    "load_failures",
    "no_completed_requests",
    "usage_missing",
    "drain_deadline",
    "backoff",
    "cancelled",
    "worker_errors",
    "counters_inconsistent",
    "client_overloaded",
    "load_clean",
    "gate_failed",
    "gate_passed_on_retry",
}


def _check_verdict(run_dir: Path, rec: RunRecord, again: LoadSummary, problems: list[str]) -> None:
    _, reasons = decide(
        Findings(
            load=again,
            aborted="(as recorded)" if rec.status is Status.ABORTED else None,
            health=rec.client_health,
            max_failures=int(rec.config.get("max_failures", 0)),
            max_loop_lag_s=float(rec.config.get("max_loop_lag_s", 0.5)),
            gates=gates_from_journal(run_dir / "probes.jsonl"),
        )
    )
    want = {r.code for r in reasons} & _DERIVED
    have = {r.code for r in rec.reasons} & _DERIVED
    for code in sorted(want - have):
        problems.append(f"reasons: the journal implies {code!r}, the record does not say it")
    for code in sorted(have - want):
        problems.append(f"reasons: the record says {code!r}, the journal does not support it")
