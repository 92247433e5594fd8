"""Slices of the load in ``record.json`` (schema 1.4): its steps (stages, sweep steps,
live changes), its workload classes (a mix) and its conversation turns — each with its own
:class:`~soak.record.load_summary.LoadSummary` computed from the journal lines it holds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from soak.record.load_summary import LoadSummary
from soak.record.shape import AbsentUnlessSet

StepOrigin = Literal["stage", "sweep", "live"]
"""Where a load step came from: a ``--stages`` stage, a ``--sweep`` step, or a live change
of rate or concurrency (the monitor's keys, ``soaktop control``)."""


class LoadStep(AbsentUnlessSet):
    """One step of a load whose target changes during the run (schema 1.4): its span, its
    target, and the figures of the requests sent in it (journal lines ``step == index``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    index: int
    """0-based, in time order; the journal lines' ``step``."""
    origin: StepOrigin
    label: str
    """In words: ``stage 2: 10 → 40 req/s over 120 s``, ``rate=20``, ``live: concurrency 48``."""
    start_s: float
    """Seconds since the run origin: the step's first moment (the previous one's end)."""
    end_s: float | None = None
    """The next step's start, or the issue window's end (None while the step runs)."""
    rate_start: float | None = None
    """Open loop: the target rate (requests/s) at the step's start."""
    rate_end: float | None = None
    """Open loop: the target at its end (differs from ``rate_start`` on a linear ramp)."""
    concurrency_start: int | None = None
    """Closed loop: the target concurrency at the step's start."""
    concurrency_end: int | None = None
    """Closed loop: the target at its end (a ramp adds or parks workers along it)."""
    settle_s: float = 0.0
    """The head of the step left out of its figures (a sweep's settle time): its requests
    are journaled with the step and judged nowhere but the whole load's figures."""
    load: LoadSummary | None = None
    """The step's figures (:func:`soak.record.summary.summarize_load` sliced to the step
    after its settle); None while it runs."""
    goodput: float | None = None
    """Requests/s that completed meeting every ``--slo`` objective over the step's span
    after its settle (without an SLO: every completed one; ``soak.judge.goodput``)."""


class SweepResult(BaseModel):
    """A sweep's outcome (``--sweep``, schema 1.4): its SLO and its knee."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    kind: Literal["rate", "concurrency"]
    slo: list[str] = Field(default_factory=list)
    """The objectives a good request met (``ttft<2s``); empty: goodput is throughput."""
    knee_step: int | None = None
    """The step index of the knee; None: goodput still rose at the sweep's last step."""
    rule: str
    """How the knee is found, in words (``soak.judge.goodput.KNEE_RULE``)."""


class WorkloadClassFigures(BaseModel):
    """One class of a mixed load (``--mix``, schema 1.4): its share and its own figures
    (journal lines ``workload_class == name``); the classes' counts sum to the load's."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    weight: float
    """The class's weight as the mix file gave it (its share is weight ÷ the sum)."""
    load: LoadSummary


class TurnFigures(BaseModel):
    """One turn index of a conversation load (``--turns``, schema 1.4): the figures of the
    journal lines ``turn == index`` (their counts sum to the load's)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    index: int
    """1-based: a session's first request is turn 1."""
    sessions_ended: int = 0
    """Sessions this turn ended early: it failed, or soaktop cut it."""
    history_truncated: int = 0
    """Requests whose history held an answer cut at the client's 64 KiB bound."""
    load: LoadSummary


class SessionFigures(BaseModel):
    """The sessions of a conversation load (schema 1.4), those whose turn 1 was judged:
    ``started`` = ``completed`` + ``ended_early`` + ``unfinished`` (the window's end)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    turns: int
    think_time_s: float
    started: int = 0
    completed: int = 0
    ended_early: int = 0
    ended_early_by_turn: dict[str, int] = Field(default_factory=dict)
    unfinished: int = 0
    history_truncated: int = 0
