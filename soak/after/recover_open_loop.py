"""``soaktop recover`` of an open-loop run: the figures only the dead runner held.

The load summary's open-loop figures need two numbers the journals do not hold as such:

- ``offered_rate``: the schedule's arrivals in the judged window. The schedule is the
  config's (arrival model, rate, burstiness, seed) under the generator's rate curve —
  its planned steps' (stages, a sweep: :func:`soak.run.load_steps.step_curve`), each
  live change of rate applied where its ``step`` event says it began — drawn again as
  finalize does (:func:`soak.run.steady_load.offered_rate`); its origin, the barrier's
  release, is the first arrival's intended send (every schedule's first offset is 0).
  Not the constant ``--rate``: a stepped load's ``rate`` is its highest target, so a
  sweep of 5 and 20 req/s would be judged against 20 throughout.
- ``held_by_cap``: the generator's count, which snapshots carry (schema 1.4) — the last
  snapshot's, at most one tick old; a run whose snapshots never said leaves it unknown
  (None), and a note says so.

The rest (achieved rate, lateness, latencies from the intended send) ``summarize_load``
computes from ``intended_s`` in the journal once ``offered_rate`` is set, as for a record
the runner wrote, so ``verify`` recomputes the same figures.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.arrivals import ARRIVAL_MODELS, RateCurve
from soak.after.journal_facts import RunJournals
from soak.after.request_facts import RequestFacts
from soak.record.models import LoadStep, PhaseSpan, Reason
from soak.record.step_figures import judged_span, steps_from_events
from soak.record.summary import LoadTiming
from soak.run.config import RunConfig
from soak.run.load_steps import step_curve, step_offered_rates
from soak.run.steady_load import offered_rate

SCHEDULE_FIELDS = (
    "arrival", "rate", "burstiness", "arrival_seed", "pool_seed", "trace_file", "time_scale",
    "stages", "sweep", "step_duration_s", "settle_s", "duration_s",
)  # fmt: skip
"""The config fields that fix an open-loop schedule (the steps' too: its rate curve)."""


def open_loop_timing(
    run_dir: Path,
    config: dict[str, Any],
    journals: RunJournals,
    timing: LoadTiming | None,
    phases: Sequence[PhaseSpan] = (),
    requests: RequestFacts | None = None,
) -> tuple[LoadTiming | None, list[Reason]]:
    """``timing`` with the open-loop figures filled in (unchanged for a closed loop or a
    window that never opened), and the notes on what could not be known. ``requests``:
    the request journal's facts, when the caller has read them (None: read here)."""
    if timing is None or config.get("arrival", "closed") == "closed":
        return timing, []
    if not config.get("rate") and config.get("arrival") != "trace":  # a trace has no rate
        return timing, []
    released = _first_intended(run_dir, requests)
    if released is None:  # no request was journaled: no window to measure
        return timing, []
    schedule = RunConfig.model_construct(**{k: config[k] for k in SCHEDULE_FIELDS if k in config})
    curve = _rate_curve(schedule, journals, released)
    rate = offered_rate(
        schedule,
        released,
        timing.issue_start_s,
        timing.issue_end_s,
        curve,
        paused_from_phases(phases, released),
    )
    held: int | None = None
    notes: list[Reason] = []
    snap = journals.last_snapshot
    if snap is not None and snap.open_loop is not None:
        held = snap.open_loop.held_by_cap
        words = f"as of the last snapshot, {snap.t:.1f} s into the run"
        notes.append(_note(f"held_by_cap is the count {words}: later holds are not known"))
    else:
        notes.append(
            _note(
                "held_by_cap is not known: the runner died and its snapshots do not carry "
                "the open loop's counters (a soaktop before schema 1.4 wrote them)"
            )
        )
    return dataclasses.replace(timing, offered_rate=rate, held_by_cap=held), notes


def _rate_curve(schedule: RunConfig, journals: RunJournals, released: float) -> RateCurve | None:
    """The generator's rate curve as the run left it (None: the plain ``--rate`` schedule,
    or a trace's fixed times): the planned steps', then every live change of rate (a
    ``live`` step after step 0, which is the load before the first change) from where
    its step began — the runner's own change came microseconds after that mark."""
    if schedule.arrival not in ARRIVAL_MODELS:
        return None
    curve = step_curve(schedule)
    for step in steps_from_events(journals.event_lines(), None):
        if step.origin != "live" or step.index == 0 or step.rate_start is None:
            continue
        if curve is None:
            curve = RateCurve(points=[(0.0, float(schedule.rate or 0.0))])
        curve.set_from(max(0.0, step.start_s - released), step.rate_start)
    return curve


def _first_intended(run_dir: Path, requests: RequestFacts | None) -> float | None:
    """The earliest ``intended_s`` in requests.jsonl (warm-up included): the release."""
    return (requests or RequestFacts.read(run_dir)).first_intended


def _note(message: str) -> Reason:
    return Reason(code="open_loop_recovered", effect="note", message=message)


def step_offers(
    run_dir: Path,
    config: dict[str, Any],
    journals: RunJournals,
    timing: LoadTiming,
    steps: Sequence[LoadStep],
    phases: Sequence[PhaseSpan] = (),
    requests: RequestFacts | None = None,
) -> list[float | None]:
    """Each recovered step's offered rate, as finalize counts it
    (:func:`soak.run.load_steps.step_offered_rates`) under the rate curve rebuilt from the
    config and the step events, less the arrivals inside the operator's pauses (the
    ``paused`` phases); None for each step of a closed loop or a trace, or when no
    request was journaled. ``requests`` as for :func:`open_loop_timing`."""
    if timing.offered_rate is None or config.get("arrival") not in ARRIVAL_MODELS:
        return [None] * len(steps)
    released = _first_intended(run_dir, requests)
    if released is None:
        return [None] * len(steps)
    schedule = RunConfig.model_construct(**{k: config[k] for k in SCHEDULE_FIELDS if k in config})
    curve = _rate_curve(schedule, journals, released) or RateCurve(
        points=[(0.0, float(schedule.rate or 0.0))]
    )
    spans = [judged_span(s, timing) for s in steps]
    return step_offered_rates(
        schedule, curve, released, spans, paused_from_phases(phases, released)
    )


def paused_from_phases(phases: Sequence[PhaseSpan], released: float) -> list[tuple[float, float]]:
    """The operator's pauses (the ``paused`` phases) in seconds from the release, as the
    live generator keeps them (one still open runs to infinity): arrivals withheld there
    were not offered."""
    return [
        (p.start_s - released, math.inf if p.end_s is None else p.end_s - released)
        for p in phases
        if p.name == "paused"
    ]
