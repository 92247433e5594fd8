"""``soaktop verify RUN_DIR``: does the record agree with the journals it was made from?

Checks each journal's and evidence file's sha256 against ``record.files``, recomputes the
load summary from ``requests.jsonl``, the gates from ``probes.jsonl`` and the faults from
``events.jsonl`` with the same functions the runner used, then judges the run again with
the one judge (:func:`soak.judge.verdict.judge`) and compares every reason with the
record's, word for word, GPU faults included. Exit 0 when everything agrees, 1 with the
list of differences otherwise.

A few reasons state facts only the record holds (:data:`RECORD_ONLY`: the preflight's
and the abort's words, soaktop's own failures, a full disk, what recover found in the
journals before it cut a torn tail): they are taken as the record gives them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probes.gates import SuiteGate, gates_json
from soak.after.journal_facts import RunJournals, as_json, config_thresholds, record_facts
from soak.after.shard_check import ShardCounts, shard_problems
from soak.judge.config_caveats import config_caveats
from soak.judge.coverage import coverage_problems
from soak.judge.facts import Judgement
from soak.judge.faults import gpu_faults_judgeable
from soak.judge.limits import percentile_method
from soak.judge.load_pass import LoadFigures, load_figures
from soak.judge.thresholds import Threshold, ThresholdError
from soak.judge.verdict import judge, status_of
from soak.record.endurance import Endurance, WindowFigures
from soak.record.faults import faults_from_events, writes_incidents
from soak.record.faults import load_start as faults_load_start
from soak.record.journal import read_jsonl, sha256_file
from soak.record.journal_lines import ProbeLine
from soak.record.journal_scan import JournalScan
from soak.record.models import (
    LoadStep,
    LoadSummary,
    Reason,
    RunRecord,
    WorkloadClassFigures,
    exit_code_for,
)
from soak.record.run_dir import JOURNALS, RunDirError, journal_problems, load_run_record
from soak.record.split_read import LineTally
from soak.record.step_figures import counts_from_record, steps_from_events
from soak.record.summary import LoadTiming
from soak.record.tally_samples import ItlShare
from soak.record.window_journal import JournalWindows
from soak.run.finalize import HASHED_FILES
from soak.run.gate_session import gates_from_journal
from soak.run.matrix_run import matrix_from_journal
from soak.run.timeline import (
    WARMUP_OUTLASTED,
    TimelineInputs,
    judged_timeline,
    not_judged,
    series_tally,
    timeline_inputs,
)

RECORD_ONLY = frozenset(
    {
        "preflight",
        "aborted",
        "internal_error",
        "storage_error",
        "record_truncated",
        "journal_torn_tail",
        "journal_damaged",
        "in_flight_at_death",
        "open_loop_recovered",
    }
)
"""Reasons whose facts only the record holds: taken as given, not re-derived."""
REQUESTS = "requests.jsonl"
LEGACY_RECOVERED = "faults_before_death"
"""What recover said of faults before the one verdict path (one reason for them all)."""
FAULT_CODES = frozenset(
    {
        "server_fault",
        "server_log_error",
        "health_outage",
        "health_slow",
        "health_client_error",
        "server_restart",
        "gpu_fault",
    }
)
THRESHOLD_CODES = frozenset(
    {
        "threshold",
        "threshold_abort",
        "threshold_breached_live",
        "threshold_no_data",
        "threshold_not_evaluated",
    }
)


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff(f"{path}.{k}", a.get(k), b.get(k), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(f"{path}[{i}]", x, y, out)
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
    # requests.jsonl's damage is counted by the figures' read of it (the one parse of
    # the biggest journal), the others' here.
    others = journal_problems(run_dir, tuple(j for j in JOURNALS if j != REQUESTS))
    scan = JournalScan(REQUESTS)
    try:
        differences = _differences(run_dir, rec, scan)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        # A line that parses as JSON but holds the wrong types (a hand edit, a disk
        # error): the journals cannot be recomputed, so nothing can be said to agree.
        problems = [p for p in journal_problems(run_dir) if p not in noted]
        raise RunDirError(
            f"{run_dir}: the journals cannot be recomputed ({type(e).__name__}: {e}); "
            + ("; ".join(problems) or "a journal line holds values of the wrong type")
        ) from None
    damage = scan.problems() if scan.done else journal_problems(run_dir, (REQUESTS,))
    return [p for p in damage + others if p not in noted] + differences


def _differences(run_dir: Path, rec: RunRecord, scan: JournalScan) -> list[str]:
    problems = _hash_problems(run_dir, rec)
    journals = RunJournals.read(run_dir)
    share = ItlShare()  # the read's gaps, held once for the load and its windows
    series = _series(rec, journals, share)
    shards = ShardCounts() if rec.shards else None
    every: list[LineTally] = []
    if series is not None and series[1] is not None:
        every.append(series[1])
    if shards is not None:
        every.append(shards)
    # One read of requests.jsonl for all of them: the load and its slices, the window
    # series, the lines of each shard, and the journal's damage (``scan``).
    figures = _figures_again(run_dir, rec, every, scan, share)
    again = _load_again(run_dir, rec, figures, problems)
    _turns_again(rec, figures, problems)
    steps = _steps_again(run_dir, rec, figures, problems)
    classes = _classes_again(rec, figures, problems)
    _check_caveats(rec, again, problems)
    # --shards: each shard's requests again (counted in the figures' read, if it ran)
    problems += shard_problems(run_dir, rec, shards if figures is not None else None)
    gates, bad_lines = gates_from_journal(run_dir)
    problems += bad_lines
    _diff("gates", gates_json(rec.gates), gates_json(gates), problems)
    _check_evidence(run_dir, rec, problems)
    faults = faults_from_events(
        journals.event_lines(),
        faults_load_start(again, rec.matrix),
        incidents=writes_incidents(rec.schema_version),  # a 1.2 record numbers none
    )
    _diff("faults", {"faults": as_json(rec.faults)}, {"faults": faults}, problems)
    problems += coverage_problems(as_json(rec.telemetry))
    endurance = _timeline_again(run_dir, rec, journals, problems, series)
    _check_verdict(rec, journals, again, gates, problems, endurance, steps, classes)
    implied = status_of(rec.reasons)
    if rec.status is not implied:
        problems.append(f"status: record {rec.status.value}, its reasons imply {implied.value}")
    if rec.exit_code != exit_code_for(rec.status, rec.reasons):
        problems.append(
            f"exit_code: record {rec.exit_code}, the verdict implies "
            f"{exit_code_for(rec.status, rec.reasons)}"
        )
    return problems


def _hash_problems(run_dir: Path, rec: RunRecord) -> list[str]:
    """Every journal and evidence file hashed in the record, and hashed the same now."""
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
    return problems


def _figures_again(
    run_dir: Path,
    rec: RunRecord,
    every: Sequence[LineTally],
    scan: JournalScan,
    share: ItlShare,
) -> LoadFigures | None:
    """The load and all its slices recomputed from requests.jsonl in one read (``scan``;
    ``every`` offered each line), over the record's timing, its steps' spans and the
    counters only the run knew, as the record holds them (None: the record has no load,
    and nothing is read)."""
    if rec.load is None:
        return None
    return load_figures(
        run_dir / "requests.jsonl",
        LoadTiming.from_summary(rec.load),
        rec.config,
        percentile_method(rec.config),
        steps=rec.steps,
        counts=counts_from_record(rec.steps),
        turns_of=rec.load,
        every=every,
        scan=scan,
        share=share,
    )


def _load_again(
    run_dir: Path, rec: RunRecord, figures: LoadFigures | None, problems: list[str]
) -> LoadSummary | None:
    """The load summary (or the matrix) recomputed from requests.jsonl, compared."""
    if rec.load is not None and figures is not None:
        again = figures.load
        _diff("load", rec.load.model_dump(mode="json"), again.model_dump(mode="json"), problems)
        return again
    if rec.matrix is not None:
        again_matrix = matrix_from_journal(run_dir, rec.matrix)
        _diff(
            "matrix",
            rec.matrix.model_dump(mode="json"),
            again_matrix.model_dump(mode="json"),
            problems,
        )
    elif any(True for _ in read_jsonl(run_dir / "requests.jsonl")):
        problems.append("requests.jsonl holds requests but the record has no load summary")
    return None


def _turns_again(rec: RunRecord, figures: LoadFigures | None, problems: list[str]) -> None:
    """A conversation load's per-turn figures and sessions (over the record's load),
    recomputed and compared."""
    again = figures.conversation if figures is not None else {}
    mine = rec.model_dump(mode="json", include={"turns", "sessions"})
    theirs = {k: as_json(v) for k, v in again.items()}
    _diff("record", mine, theirs, problems)


def _steps_again(
    run_dir: Path, rec: RunRecord, figures: LoadFigures | None, problems: list[str]
) -> list[LoadStep]:
    """Every step's figures and goodput and the sweep's knee, recomputed from
    requests.jsonl over the record's step spans (the counters only the run knew, as the
    whole load's, from the record), compared."""
    if rec.load is None or figures is None:
        return list(rec.steps)
    _check_step_spans(run_dir, rec.steps, rec.load.issue_end_s, problems)
    if not rec.steps:
        return []
    steps, sweep = figures.steps, figures.sweep
    mine = rec.model_dump(mode="json", include={"steps", "sweep"})
    theirs: dict[str, Any] = {"steps": [s.model_dump(mode="json") for s in steps]}
    if sweep is not None:
        theirs["sweep"] = sweep.model_dump(mode="json")
    _diff("record", mine, theirs, problems)
    return steps


def _check_step_spans(
    run_dir: Path, steps: list[LoadStep], issue_end_s: float | None, problems: list[str]
) -> None:
    """The record's steps are the ones the run announced in events.jsonl (hashed): a step
    cannot be dropped, added or moved in the record alone, its figures recomputed to match."""
    announced = steps_from_events(read_jsonl(run_dir / "events.jsonl"), issue_end_s)
    if len(announced) != len(steps):
        problems.append(f"steps: record has {len(steps)}, events.jsonl announced {len(announced)}")
        return
    figures = {"load", "goodput"}
    _diff(
        "steps (events.jsonl)",
        {"steps": [s.model_dump(mode="json", exclude=figures) for s in steps]},
        {"steps": [s.model_dump(mode="json", exclude=figures) for s in announced]},
        problems,
    )


def _classes_again(
    rec: RunRecord, figures: LoadFigures | None, problems: list[str]
) -> list[WorkloadClassFigures]:
    """A mix's per-class figures, recomputed from requests.jsonl and compared."""
    again = figures.classes if figures is not None else []
    mine = {"classes": [c.model_dump(mode="json") for c in rec.classes]}
    _diff("record", mine, {"classes": [c.model_dump(mode="json") for c in again]}, problems)
    return again


def _check_caveats(rec: RunRecord, load: LoadSummary | None, problems: list[str]) -> None:
    """The record's caveats, derived again from its parts (the load recomputed from the
    journal). A record older than schema 1.3 has none to compare."""
    if "caveats" not in rec.model_fields_set:
        return
    again = config_caveats(rec.config, load, rec.identity, rec.telemetry, rec.matrix)
    mine = [(c.code, c.message) for c in again]
    theirs = [(c.code, c.message) for c in rec.caveats]
    for code, msg in (c for c in mine if c not in theirs):
        problems.append(
            f"caveats: the record's parts imply {code!r} ({msg}), the record does not say it"
        )
    for code, msg in (c for c in theirs if c not in mine):
        problems.append(f"caveats: the record says {code!r} ({msg}), its parts do not imply it")


def _series(
    rec: RunRecord, journals: RunJournals, share: ItlShare
) -> tuple[TimelineInputs | None, JournalWindows | None] | None:
    """The window series to recompute: its inputs and an empty tally for the figures'
    read to fill (None, None: the warm-up outlasted the load; None: the record has no
    series to compare, being older than schema 1.2 or of no load)."""
    if rec.endurance is None or rec.load is None:
        return None
    try:
        thresholds = config_thresholds(rec.config)
    except ThresholdError:
        thresholds = []  # _check_verdict names it
    timing = LoadTiming.from_summary(rec.load)
    now = max((ev.t for ev in journals.events), default=0.0)
    inputs = timeline_inputs(timing, rec.config, journals.events, thresholds, now)
    if inputs is None:
        return None, None
    return inputs, series_tally(inputs, percentile_method(rec.config), share)


def _timeline_again(
    run_dir: Path,
    rec: RunRecord,
    journals: RunJournals,
    problems: list[str],
    series: tuple[TimelineInputs | None, JournalWindows | None] | None,
) -> Endurance | None:
    """The window series and its judgement recomputed from the journals (``series``
    from :func:`_series`, tallied in the figures' read), compared with the record's (a
    record older than schema 1.2 has neither: nothing to compare)."""
    if series is None or rec.endurance is None:
        return rec.endurance
    inputs, tally = series
    if inputs is None or tally is None:
        again = not_judged(rec.config, WARMUP_OUTLASTED, rec.endurance.warmup)
        windows: list[WindowFigures] = []
    else:
        windows, again = judged_timeline(
            run_dir, inputs, journals.events, percentile_method(rec.config), tallied=tally
        )
    _diff(
        "windows",
        {"windows": [w.model_dump(mode="json") for w in rec.windows]},
        {"windows": [w.model_dump(mode="json") for w in windows]},
        problems,
    )
    _diff(
        "endurance", rec.endurance.model_dump(mode="json"), again.model_dump(mode="json"), problems
    )
    return again


def _check_evidence(run_dir: Path, rec: RunRecord, problems: list[str]) -> None:
    """Every evidence file is hashed, and every one a probe names exists."""
    for evidence in sorted((run_dir / "evidence").glob("*.json")):
        rel = str(evidence.relative_to(run_dir))
        if rel not in rec.files:
            problems.append(f"{rel} is in the run directory but the record holds no hash of it")
    for line in read_jsonl(run_dir / "probes.jsonl"):
        try:
            probe = ProbeLine.model_validate(line)
        except ValueError:
            continue  # gates_from_journal names the line
        ref = probe.evidence
        if ref and not (run_dir / ref).exists():
            problems.append(f"probe {probe.request_id} names {ref}, which is missing")


def _check_verdict(
    rec: RunRecord,
    journals: RunJournals,
    again: LoadSummary | None,
    gates: dict[str, dict[str, SuiteGate]],
    problems: list[str],
    endurance: Endurance | None,
    steps: list[LoadStep] | None = None,
    classes: list[WorkloadClassFigures] | None = None,
) -> None:
    """The run judged again: the final threshold states and every reason the facts
    imply, against the record's."""
    skip = set(RECORD_ONLY)
    try:
        thresholds: list[Threshold] = config_thresholds(rec.config)
    except ThresholdError as e:
        problems.append(f"config.thresholds cannot be parsed: {e}")
        thresholds, skip = [], skip | THRESHOLD_CODES
    if any(r.code == LEGACY_RECOVERED for r in rec.reasons):
        skip |= FAULT_CODES | {LEGACY_RECOVERED}  # recovered by an older soaktop
    if not gpu_faults_judgeable(journals.event_lines()):
        skip.add("gpu_fault")  # events of an older soaktop: no verdict words to compare
    facts = record_facts(rec, journals, load=again, gates=gates, thresholds=thresholds)
    facts.endurance = endurance
    facts.steps = steps or []
    facts.classes = classes or []
    verdict = judge(facts)
    if not skip >= THRESHOLD_CODES:
        _check_thresholds(rec, verdict, problems)
    _compare_reasons(
        [r for r in verdict.reasons if r.code not in skip],
        [r for r in rec.reasons if r.code not in skip],
        problems,
    )


def _check_thresholds(rec: RunRecord, verdict: Judgement, problems: list[str]) -> None:
    """The final threshold states, recomputed from the config and the record's figures."""
    mine = {s.expr: (s.state, s.observed) for s in verdict.thresholds}
    theirs = {t.expr: (t.state, t.observed) for t in rec.thresholds}
    if mine != theirs:
        problems.append(f"thresholds: record {theirs}, recomputed {mine}")


def _compare_reasons(want: list[Reason], have: list[Reason], problems: list[str]) -> None:
    """Both lists say the same reasons, word for word and with the same effect."""
    mine = Counter((r.code, r.message) for r in want)
    theirs = Counter((r.code, r.message) for r in have)
    for code, msg in sorted((mine - theirs).elements()):
        problems.append(f"reasons: the journals imply {code!r} ({msg}), the record does not say it")
    for code, msg in sorted((theirs - mine).elements()):
        problems.append(f"reasons: the record says {code!r} ({msg}), the journals do not")
    effects = {(r.code, r.message): r.effect for r in want}
    for r in have:
        implied = effects.get((r.code, r.message))
        if implied is not None and implied != r.effect:
            problems.append(
                f"reasons: the record says {r.code!r} ({r.message}) is {r.effect}, "
                f"the journals imply {implied}"
            )
