"""``soaktop recover RUN_DIR``: a record for a run whose runner died without one.

Rebuilds the timing from ``events.jsonl`` (phase and barrier events), the load summary
from ``requests.jsonl`` and the gates from ``probes.jsonl`` (a torn last line is
ignored), marks the run ABORTED with the reason "runner killed", and never edits the
journals: their hashes go into the record.

The verdict is the one judge's (:func:`soak.judge.verdict.judge`), on the facts the
journals hold (:mod:`soak.after.journal_facts`): the faults the events name (server-log
faults, restarts, /health outages, GPU faults) give the reasons finalize would have
given, and the thresholds are judged on the figures the journals keep.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak.after.journal_facts import RunJournals, config_thresholds, recovered_facts
from soak.after.recover_open_loop import open_loop_timing, step_offers
from soak.after.request_facts import RequestFacts
from soak.judge.config_caveats import config_caveats
from soak.judge.limits import percentile_method
from soak.judge.load_pass import LoadFigures, load_figures
from soak.judge.thresholds import Threshold, ThresholdError
from soak.judge.verdict import judge
from soak.record.endurance import Endurance, WindowFigures
from soak.record.events import Event
from soak.record.faults import faults_from_events, load_start
from soak.record.journal import release_reserve, repair_tail, storage_words
from soak.record.journal_lines import BarrierData, PhaseData, event_data
from soak.record.models import (
    EXIT_STORAGE,
    EXIT_USAGE,
    Identity,
    PhaseSpan,
    Reason,
    RunRecord,
    exit_code_for,
    write_atomic,
    write_record,
)
from soak.record.run_dir import (
    RunDirError,
    check_run_dir,
    journal_problems,
    load_run_config,
    record_problem,
)
from soak.record.sections import Fault
from soak.record.step_figures import StepCounts, steps_from_events
from soak.record.summary import LoadTiming
from soak.record.summary_csv import summary_csv
from soak.record.tally_samples import ItlShare
from soak.record.telemetry import RecordTelemetry
from soak.record.window_journal import JournalWindows
from soak.run.control import live_runner_pid
from soak.run.finalize import run_files
from soak.run.gate_session import gates_from_journal
from soak.run.matrix_run import matrix_from_journals
from soak.run.timeline import (
    WARMUP_OUTLASTED,
    TimelineInputs,
    judged_timeline,
    not_judged,
    series_tally,
    timeline_inputs,
)


class RecoverError(RuntimeError):
    """The run directory cannot be recovered (the message says why)."""

    exit_code = EXIT_USAGE


class RecoverStorageError(RecoverError):
    """The record could not be written (disk full...): free space and recover again."""

    exit_code = EXIT_STORAGE


JOURNALS = ("events.jsonl", "requests.jsonl", "probes.jsonl", "snapshots.jsonl", "telemetry.jsonl")
"""The journals whose torn tails recover cuts before reading them."""


def _repair_tails(run_dir: Path) -> tuple[list[Reason], dict[Path, bytes]]:
    """Cut a torn last line off each journal (a writer killed mid-line): the notes that
    say so, and the bytes cut (put back if the record cannot be written after all)."""
    notes = []
    cut: dict[Path, bytes] = {}
    for name in JOURNALS:
        try:
            torn = repair_tail(run_dir / name)
        except OSError as e:
            raise RecoverError(f"{name}: cannot repair its torn last line: {e}") from None
        if torn:
            cut[run_dir / name] = torn
            notes.append(
                Reason(
                    code="journal_torn_tail",
                    effect="note",
                    message=f"{name} ended in a torn line ({len(torn)} bytes, written when the "
                    "runner died): it was cut off; every whole line before it is kept",
                )
            )
    return notes, cut


def _put_back(cut: dict[Path, bytes]) -> None:
    """Undo :func:`_repair_tails` (the bytes fit: they were just freed), best effort."""
    for path, torn in cut.items():
        with contextlib.suppress(OSError), path.open("ab") as fh:
            fh.write(torn)


def _timing_from_events(
    requests: RequestFacts, events: list[Event], config: dict[str, Any]
) -> tuple[LoadTiming | None, list[PhaseSpan]]:
    phases: list[PhaseSpan] = [PhaseSpan(name="identity", start_s=0.0)]
    barrier: tuple[BarrierData, str | None] | None = None  # its data and wall time
    warmup_end: float | None = None
    last_t = 0.0
    for ev in events:
        last_t = max(last_t, ev.t)
        if ev.kind == "phase":
            phases[-1].end_s = ev.t
            phases.append(PhaseSpan(name=event_data(ev, PhaseData).phase, start_s=ev.t))
        elif ev.kind == "barrier":
            barrier = event_data(ev, BarrierData), ev.wall or None
        elif ev.kind == "warmup" and isinstance(ev.data.get("end_s"), int | float):
            warmup_end = float(ev.data["end_s"])
    journaled = requests.judged
    last_t = max(last_t, requests.last_end)
    phases[-1].end_s = last_t
    if barrier is None:
        return None, phases
    data, wall = barrier
    starts: dict[str, float] = {}
    for p in phases:  # the first time each phase began (a pause re-enters "load")
        starts.setdefault(p.name, p.start_s)
    issue_start = starts.get("load")
    issue_end = starts.get("drain", last_t if issue_start is not None else None)
    drain_end = starts.get("after_gates", starts.get("finalize", last_t))
    released = issue_start is not None
    if config.get("warmup") and released:  # the judged window begins after the warm-up
        issue_start = warmup_end if warmup_end is not None else issue_end
    requested = data.requested if data.requested is not None else config.get("concurrency", 0)
    return (
        LoadTiming(
            requested_concurrency=int(requested),
            workers_started=data.workers_started,
            barrier_released=released,
            worker_start_failures=dict(data.failures),
            barrier_released_at=wall if released else None,
            issue_start_s=issue_start,
            issue_end_s=issue_end,
            drain_end_s=drain_end if released else None,
            issued=journaled,
            stop_reason="runner killed",
            sanity_checked=bool(config.get("sanity_checks", False)),  # older runs: no checks
        ),
        phases,
    )


def _in_flight_at_death(journals: RunJournals, journaled: int) -> int:
    """Requests issued (per the last snapshot) that never reached the journal."""
    snap = journals.last_snapshot
    issued = 0 if snap is None else snap.load.issued
    return max(0, issued - journaled)


def recover_run(run_dir: Path) -> RunRecord:
    """Write record.json and summary.csv for a dead runner's directory; return the record."""
    try:
        check_run_dir(run_dir)
    except RunDirError as e:
        raise RecoverError(str(e)) from None
    if (run_dir / "record.json").exists():
        damaged = record_problem(run_dir)
        raise RecoverError(
            f"{run_dir} already has a record.json; nothing to recover"
            if damaged is None
            else f"{damaged}; move it aside to rebuild the record from the journals"
        )
    if (pid := live_runner_pid(run_dir)) is not None:
        raise RecoverError(
            f"the runner of {run_dir} is still alive (pid {pid}); it will write its own record"
        )
    try:
        config = load_run_config(run_dir)
    except RunDirError as e:
        raise RecoverError(str(e)) from None
    torn, cut = _repair_tails(run_dir)
    try:
        return _recover(run_dir, config, torn)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        _put_back(cut)  # nothing written: the journals go back to what they were
        raise RecoverError(
            f"{run_dir}: a journal line does not have the shape soaktop writes "
            f"({type(e).__name__}: {e}); nothing was changed"
        ) from None
    except BaseException:
        _put_back(cut)
        raise


def _recover(run_dir: Path, config: dict[str, Any], torn: list[Reason]) -> RunRecord:
    """The record from the journals (their torn tails already cut), written."""
    journals = RunJournals.read(run_dir)
    # Two reads of requests.jsonl in all: its counts and instants (the timing's), then
    # the load, each step (a sweep's knee), class and turn, and the window series.
    requests = RequestFacts.read(run_dir)
    timing, phases = _timing_from_events(requests, journals.events, config)
    timing, open_loop_notes = open_loop_timing(run_dir, config, journals, timing, phases, requests)
    share = ItlShare()  # the read's gaps, held once for the load and its windows
    series = _series(config, journals, timing, share)
    tally = None if isinstance(series, str) else series[1]
    figures = _figures(run_dir, config, journals, timing, phases, requests, tally, share)
    load = figures.load if figures is not None else None
    gates, bad_lines = gates_from_journal(run_dir)
    matrix = matrix_from_journals(run_dir, config)
    windows, endurance = _timeline(run_dir, config, journals, series)
    facts = recovered_facts(
        config,
        journals,
        load=load,
        matrix=matrix,
        gates=gates,
        phases=phases,
        thresholds=_thresholds(config),
        notes=torn
        + _journal_notes(run_dir, journals, timing, requests, bad_lines)
        + open_loop_notes,
    )
    facts.endurance = endurance
    if figures is not None:
        facts.steps, facts.classes = figures.steps, figures.classes
    verdict = judge(facts)
    identity, damaged = _identity(run_dir)
    reasons = verdict.reasons + damaged
    faults = faults_from_events(journals.event_lines(), load_start(load, matrix))
    record = RunRecord(
        run_id=run_dir.name,
        status=verdict.status,
        reasons=reasons,
        exit_code=exit_code_for(verdict.status, reasons),
        config=config,
        identity=identity,
        load=load,
        matrix=matrix,
        gates=gates,
        thresholds=verdict.thresholds,
        faults=[Fault.model_validate(f) for f in faults],
        windows=windows,
        caveats=config_caveats(config, load, identity, RecordTelemetry(), matrix),
        endurance=endurance,
        phases=phases,
        started_at=_first_wall(journals.events) or "",
        ended_at=_last_wall(journals) or datetime.now(UTC).isoformat(timespec="milliseconds"),
        recovered=True,
        files=run_files(run_dir),
        **(figures.sections() if figures is not None else {}),
    )
    _write(run_dir, record)
    return record


def _figures(
    run_dir: Path,
    config: dict[str, Any],
    journals: RunJournals,
    timing: LoadTiming | None,
    phases: list[PhaseSpan],
    requests: RequestFacts,
    tally: JournalWindows | None,
    share: ItlShare,
) -> LoadFigures | None:
    """The load and all its slices from one read of requests.jsonl, measured as finalize
    measures them (None: no load ran); every line is offered to the window series'
    ``tally`` in the same read. The steps come from their ``step`` events; an
    open loop's get their offered rates from the rate curve redrawn
    (:func:`~soak.after.recover_open_loop.step_offers`); the arrivals held by the cap
    in each, which only the live run counted, are unknown (None)."""
    if timing is None:
        return None
    steps = steps_from_events(journals.event_lines(), timing.issue_end_s)
    offers = (
        step_offers(run_dir, config, journals, timing, steps, phases, requests) if steps else []
    )
    counts = [
        StepCounts() if offered is None else StepCounts(offered, held_by_cap=None)
        for offered in offers
    ]
    return load_figures(
        run_dir / "requests.jsonl",
        timing,
        config,
        percentile_method(config),
        steps=steps,
        counts=counts,
        every=() if tally is None else (tally,),
        share=share,
    )


_NO_SERIES = "no series"
"""The run has no window series: no load was released, or a matrix ran."""

Series = tuple[TimelineInputs, JournalWindows] | str
"""The window series' inputs and its empty tally (offered the request lines by the
figures' read), or why the run has none (:data:`_NO_SERIES`, or
:data:`~soak.run.timeline.WARMUP_OUTLASTED`)."""


def _series(
    config: dict[str, Any], journals: RunJournals, timing: LoadTiming | None, share: ItlShare
) -> Series:
    """The run's window series, to be tallied in the figures' read (:data:`Series`),
    its gaps held in the read's ``share``."""
    if timing is None or not timing.barrier_released or config.get("matrix"):
        return _NO_SERIES
    now = max((ev.t for ev in journals.events), default=0.0)
    inputs = timeline_inputs(timing, config, journals.events, _thresholds(config), now)
    if inputs is None:
        return WARMUP_OUTLASTED
    return inputs, series_tally(inputs, percentile_method(config), share)


def _timeline(
    run_dir: Path, config: dict[str, Any], journals: RunJournals, series: Series
) -> tuple[list[WindowFigures], Endurance | None]:
    """The window series and its judgement from the journals, as finalize makes them
    (``series`` from :func:`_series`, its tally offered every request line)."""
    if series == _NO_SERIES:
        return [], None
    if isinstance(series, str):
        return [], not_judged(config, series, None)
    inputs, tally = series
    return judged_timeline(
        run_dir, inputs, journals.events, percentile_method(config), tallied=tally
    )


def _thresholds(config: dict[str, Any]) -> list[Threshold]:
    """The run's thresholds (none when its config holds ones this soaktop cannot parse:
    the runner refused such a config, so it did not write this one)."""
    try:
        return config_thresholds(config)
    except ThresholdError:
        return []


def _journal_notes(
    run_dir: Path,
    journals: RunJournals,
    timing: LoadTiming | None,
    requests: RequestFacts,
    bad_lines: list[str],
) -> list[Reason]:
    """What recover found in the journals: requests in flight when the runner died, lines
    that could not be read."""
    notes: list[Reason] = []
    if timing is not None and (lost := _in_flight_at_death(journals, requests.every_line)):
        notes.append(
            Reason(
                code="in_flight_at_death",
                effect="note",
                message=f"{lost} requests were in flight when the runner died: outcome unknown",
            )
        )
    notes += [Reason(code="journal_damaged", effect="note", message=m) for m in bad_lines]
    damage: list[str] = []
    for name in JOURNALS:  # probes.jsonl's bad lines are gates_from_journal's
        if name == "requests.jsonl":
            damage += requests.problems  # said by the read of RequestFacts
        elif name != "probes.jsonl":
            damage += journal_problems(run_dir, (name,))
    notes += [Reason(code="journal_damaged", effect="note", message=m) for m in damage]
    return notes


def _identity(run_dir: Path) -> tuple[Identity | None, list[Reason]]:
    """identity.json (written before the load), or None with a note when it is damaged."""
    if not (run_dir / "identity.json").exists():
        return None, []
    try:
        return Identity.model_validate_json((run_dir / "identity.json").read_bytes()), []
    except (OSError, ValueError):  # damaged: the record says so and goes on without it
        note = Reason(
            code="journal_damaged",
            effect="note",
            message="identity.json is damaged (not the identity JSON the runner "
            "writes): the record has no identity",
        )
        return None, [note]


def _write(run_dir: Path, record: RunRecord) -> None:
    """record.json then summary.csv, into the space a killed runner held; all or nothing."""
    release_reserve(run_dir)  # a runner killed mid-run leaves the space it held
    try:
        write_record(run_dir, record)
        write_atomic(run_dir / "summary.csv", summary_csv(record))
    except OSError as e:
        (run_dir / "record.json").unlink(missing_ok=True)  # all or nothing: recover again
        raise RecoverStorageError(
            f"cannot write the record into {run_dir}: {storage_words(e)}; nothing was "
            "changed; free some space and run soaktop recover again"
        ) from None


def _first_wall(events: list[Event]) -> str | None:
    return (events[0].wall or None) if events else None


def _last_wall(journals: RunJournals) -> str | None:
    """The last moment the journals show the run alive: the later of the last event's and
    the last snapshot's wall time (a snapshot is written every tick). Not the time of
    the recovery: a run that died on Monday and was recovered on Wednesday ended Monday.
    None where neither holds a wall time that reads as one."""
    walls = [journals.events[-1].wall] if journals.events else []
    if journals.last_snapshot is not None:
        walls.append(journals.last_snapshot.wall)
    read: list[tuple[datetime, str]] = []
    for wall in walls:
        with contextlib.suppress(ValueError):
            if (at := datetime.fromisoformat(wall)).tzinfo is not None:  # as soaktop writes
                read.append((at, wall))
    return max(read)[1] if read else None
