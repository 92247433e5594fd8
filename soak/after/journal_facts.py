"""A run's facts from its run directory: what ``soaktop recover`` and ``soaktop verify``
hand to the one judge (:func:`soak.judge.verdict.judge`).

Finalize gathers the facts from the live run; these gather them from the journals the
run left: the events (GPU faults, server-log faults, restarts, /health changes, the
threshold that stopped the load), the last snapshot (the live threshold states, the
fault counts so far) and the config (the limits, the thresholds). What only the record
holds (the client's health, the reconciliation, the telemetry summaries) ``verify``
takes from the record (:func:`record_facts`); a recovered record has none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from probes.gates import SuiteGate
from soak.judge.facts import RunFacts
from soak.judge.faults import gpu_fault_events, telemetry_from_journals
from soak.judge.limits import limits_from_config
from soak.judge.thresholds import Threshold, ThresholdState, parse_thresholds
from soak.record import lenient
from soak.record.events import Event
from soak.record.journal import read_jsonl
from soak.record.journal_lines import ThresholdData, event_data, read_events
from soak.record.matrix import MatrixSummary
from soak.record.models import LoadSummary, PhaseSpan, Reason, RunRecord, Status
from soak.record.snapshot import Snapshot

RECOVERED_ABORT = "runner killed: no record was written; recovered from the journals"
"""The abort reason of every recovered record."""


def as_json(value: Any) -> Any:
    """A record section as the JSON it is written as (typed sections are dumped), for
    the judges that read the record's JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value


@dataclass
class RunJournals:
    """What the journals say beyond the load and the gates (read once, through the
    models: :func:`soak.record.journal_lines.read_events` and a lenient
    :class:`~soak.record.snapshot.Snapshot`)."""

    events: list[Event]
    last_snapshot: Snapshot | None

    @classmethod
    def read(cls, run_dir: Path) -> RunJournals:
        """events.jsonl and the last line of snapshots.jsonl (torn lines skipped; an
        event with a value of the wrong type raises ``JournalLineError``, a ValueError)."""
        last = None
        for last in read_jsonl(run_dir / "snapshots.jsonl"):  # noqa: B007 - the last one
            pass
        return cls(read_events(run_dir / "events.jsonl"), _snapshot(last))

    def event_lines(self) -> list[dict[str, Any]]:
        """The events as the JSON they were written as, for the judges that read it
        (``soak.judge.faults``, ``soak.record.faults``)."""
        return [ev.model_dump(mode="json") for ev in self.events]

    def snapshot_line(self) -> dict[str, Any] | None:
        """The last snapshot as the JSON it was written as (None: there was none)."""
        snap = self.last_snapshot
        return None if snap is None else snap.model_dump(mode="json")

    def live_thresholds(self) -> list[ThresholdState]:
        """The live watch's states in the last snapshot (their first breaches)."""
        return [] if self.last_snapshot is None else list(self.last_snapshot.thresholds)

    def abort_threshold(self, thresholds: list[Threshold]) -> Threshold | None:
        """The ``abort`` threshold that stopped the load (its ``error`` event), if one did."""
        by_expr = {t.expr: t for t in thresholds}
        for ev in self.events:
            if ev.kind != "threshold" or ev.severity != "error":
                continue
            expr = event_data(ev, ThresholdData).expr
            if expr in by_expr:
                return by_expr[expr]
        return None


def _snapshot(line: dict[str, Any] | None) -> Snapshot | None:
    """A snapshot line read leniently: another version's keys left out, a damaged value
    dropped (it reads as its default), nothing read of another major version."""
    if line is None:
        return None
    return lenient.read(Snapshot, line, on_wrong_type="drop", on_item_missing="drop").value


def config_thresholds(config: Mapping[str, Any]) -> list[Threshold]:
    """The run's thresholds as its config gave them (ThresholdError: they do not parse)."""
    gpu = bool(config.get("nvml", True) or config.get("dcgm"))
    return parse_thresholds(list(config.get("thresholds") or []), gpu_telemetry=gpu)


def before_blocked(
    gates: dict[str, dict[str, SuiteGate]], force_load: bool, load: LoadSummary | None
) -> bool:
    """The before-load gates failed and so no load ran (without ``--force-load``)."""
    failed = any(g.failures for g in gates.get("before", {}).values())
    return failed and not force_load and load is None


def recovered_facts(
    config: Mapping[str, Any],
    journals: RunJournals,
    *,
    load: LoadSummary | None,
    matrix: MatrixSummary | None,
    gates: dict[str, dict[str, SuiteGate]],
    phases: list[PhaseSpan],
    thresholds: list[Threshold],
    notes: list[Reason],
) -> RunFacts:
    """The facts of a run whose runner died without a record: ABORTED ("runner killed"),
    judged on what its journals hold (``notes``: what recover itself found)."""
    force = bool(config.get("force_load"))
    return RunFacts(
        **limits_from_config(config),
        aborted=RECOVERED_ABORT,
        stopped=True,
        phases=phases,
        load=load,
        matrix=matrix,
        gates=gates,
        gates_configured=list(config.get("gates") or []),
        before_blocked=before_blocked(gates, force, load),
        force_load=force,
        telemetry=telemetry_from_journals(journals.event_lines(), journals.snapshot_line()),
        gpu_fault_events=gpu_fault_events(journals.event_lines()),
        thresholds=thresholds,
        threshold_live=journals.live_thresholds(),
        threshold_abort=journals.abort_threshold(thresholds),
        extra=notes,
    )


def record_facts(
    rec: RunRecord,
    journals: RunJournals,
    *,
    load: LoadSummary | None,
    gates: dict[str, dict[str, SuiteGate]],
    thresholds: list[Threshold],
) -> RunFacts:
    """The facts ``soaktop verify`` judges a record by: the load and the gates recomputed
    from their journals, the GPU faults and the threshold that stopped the load from the
    events, and what only the record holds (its preflight and abort words, the client's
    health, the telemetry summaries, the reconciliation). A recovered record is judged
    as recover judged it, from the journals alone."""
    cfg = rec.config
    force = bool(cfg.get("force_load"))
    live = {s.expr: s for s in rec.thresholds}  # their first live breaches
    abort = journals.abort_threshold(thresholds)
    if abort is not None:  # what the watch saw when it stopped the load
        live |= {s.expr: s for s in journals.live_thresholds() if s.expr == abort.expr}
    recovered = rec.recovered
    return RunFacts(
        **limits_from_config(cfg),
        preflight_errors=[r.message for r in rec.reasons if r.code == "preflight"],
        aborted=next((r.message for r in rec.reasons if r.code == "aborted"), None),
        stopped=rec.status is Status.ABORTED,
        phases=list(rec.phases),
        load=load,
        matrix=rec.matrix,
        health=None if recovered else rec.client_health,
        gates=gates,
        gates_configured=list(cfg.get("gates") or []),
        before_blocked=before_blocked(gates, force, load),
        force_load=force,
        telemetry=(
            telemetry_from_journals(journals.event_lines(), journals.snapshot_line())
            if recovered
            else as_json(rec.telemetry)
        ),
        gpu_fault_events=gpu_fault_events(journals.event_lines()),
        reconciliation={} if recovered else as_json(rec.reconciliation),
        shards=rec.shards,
        thresholds=thresholds,
        threshold_live=list(live.values()),
        threshold_abort=abort,
    )
