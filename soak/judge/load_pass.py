"""The record's load figures and every slice of them, from one read of ``requests.jsonl``.

The whole load (:func:`soak.record.summary.summarize_load`), each step with its goodput
and the sweep's knee (:func:`soak.judge.goodput.measured_steps`), each workload class of
a mix (:func:`soak.record.class_figures.class_figures`) and each turn of a conversation
load with its sessions (:func:`soak.record.turn_figures.conversation_fields`): the same
figures those compute one read each, here from a single read — a 24-hour soak's journal
is millions of lines, and a live exploration has tens of steps, a conversation up to 32
turns. finalize, ``verify`` and ``recover`` all take this path.

Each line is parsed once and offered to the whole load's tally and to each family of
slices, which routes it to its slice by a look-up (a step's span or stamp, a class name,
a turn index). Memory: the whole load's tally and every slice's are held until the read
ends, each sample 8 bytes in a typed array. Each slice family partitions the load, so
each holds about one more copy of the load's samples — ~40 bytes a completed request
(ttft, e2e, tpot, ttfb, first content), ~64 in an open loop — and 4 bytes a request for
where its gaps lie: the inter-token gaps (one per token, the bulk) are held once for all
the tallies, 4 bytes a gap (:class:`~soak.record.tally_samples.ItlShare`). With 20 steps, 3
classes and 4 turns at 32 tokens a request that is ~0.4 KB a request held (float lists
and a gaps array per request held ~1.1); at the end, the whole load's gaps as float64
seconds (8 bytes a gap) while its summary is made. ``bench/finalize_cost.py``, 1,000,000
lines: 0.84 GB peak RSS, the benchmark's own visitor included (1.7 GB before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.stats import PercentileMethod
from soak.judge.goodput import good_line, sweep_of
from soak.record.class_figures import ClassTallies, class_section, mix_classes
from soak.record.journal_scan import JournalScan
from soak.record.models import LoadStep, LoadSummary, SweepResult, WorkloadClassFigures
from soak.record.split_read import LineTally, RangeTally, read_load_split
from soak.record.step_figures import StepCounts, StepTallies, step_sections
from soak.record.summary import LineOffer, LoadTally, LoadTiming, read_load
from soak.record.tally_samples import ItlShare
from soak.record.turn_figures import conversation_tallies


@dataclass
class LoadFigures:
    """What the one read yields: the whole load and its slices, as the record holds them."""

    load: LoadSummary
    steps: list[LoadStep] = field(default_factory=list)
    """Every step with its figures (empty: a load without steps)."""
    sweep: SweepResult | None = None
    classes: list[WorkloadClassFigures] = field(default_factory=list)
    """A mix's classes (empty: a load without one)."""
    conversation: dict[str, Any] = field(default_factory=dict)
    """The record's ``turns`` and ``sessions`` (empty: not a conversation load)."""

    def sections(self) -> dict[str, Any]:
        """The record's slices of the load, for ``RunRecord``, each only where the load
        has it: ``steps`` and ``sweep``, a mix's ``classes``, a conversation's ``turns``
        and ``sessions`` (a load with none writes none of these keys)."""
        return {
            **step_sections(self.steps, self.sweep),
            **class_section(self.classes),
            **self.conversation,
        }


def load_figures(
    requests_path: Path,
    timing: LoadTiming,
    config: Mapping[str, Any],
    method: PercentileMethod,
    steps: Sequence[LoadStep] = (),
    counts: Sequence[StepCounts] = (),
    visit: LineOffer | None = None,
    turns_of: LoadSummary | None = None,
    every: Sequence[LineTally] = (),
    scan: JournalScan | None = None,
    share: ItlShare | None = None,
    readers: int | None = None,
) -> LoadFigures:
    """The whole load over ``timing`` (``visit`` sees each of its lines, as
    :func:`summarize_load`'s does), ``steps`` measured with ``counts`` under the config's
    ``slo``, the config's mix classes and conversation turns — all from one read.

    ``turns_of`` is the load summary whose timing the turns take (``verify`` checks the
    record's turns against the record's load, as it always has); by default, the load
    this read computes. ``every`` and ``scan`` go to the read
    (:func:`~soak.record.summary.read_load`): visitors of every line, the warm-up's
    included, and a scan that counts the journal's damage in the same parse. ``share``
    holds the gaps of the read (given: a window series of ``every`` holds its lines'
    there too, so each gap is stored once).

    A journal of a few hundred MB or more is read in byte ranges by ``readers`` processes
    (default: one per spare core, :func:`~soak.record.split_read.readers_for`) whose
    tallies are joined exactly (:mod:`soak.record.split_read`); with a ``visit``, whose
    state cannot be joined, it is one read."""
    share = ItlShare() if share is None else share
    whole = LoadTally.for_timing(timing, share)
    offers: list[LineOffer] = [] if visit is None else [visit]
    offers.append(whole.add)
    tallies: list[RangeTally] = [whole]
    step_tallies = StepTallies(steps, timing, counts, good_line(config), share) if steps else None
    if step_tallies is not None and step_tallies.reads:
        offers.append(step_tallies.offer)
        tallies.append(step_tallies)
    mix = mix_classes(config)
    class_tallies = ClassTallies(timing, mix, share) if mix else None
    if class_tallies is not None:
        offers.append(class_tallies.offer)
        tallies.append(class_tallies)
    turns_timing = timing if turns_of is None else LoadTiming.from_summary(turns_of)
    turn_tallies = conversation_tallies(config, turns_timing, share)
    if turn_tallies is not None:
        offers.append(turn_tallies.offer)
        tallies.append(turn_tallies)
    tallies.extend(every)
    every_line = [e.offer for e in every]

    def read_range(part: JournalScan, start: int, end: int | None) -> None:
        read_load(requests_path, offers, every_line, part, start, end)

    read_load_split(
        requests_path,
        read_range,
        tallies,
        scan if scan is not None else JournalScan(requests_path.name),
        1 if visit is not None else readers,
    )
    load = whole.summary(timing, method)
    done = step_tallies.figures(method) if step_tallies is not None else []
    return LoadFigures(
        load=load,
        steps=done,
        sweep=sweep_of(done, config) if step_tallies is not None else None,
        classes=class_tallies.figures(method) if class_tallies is not None else [],
        conversation=(
            turn_tallies.fields(load if turns_of is None else turns_of, method)
            if turn_tallies is not None
            else {}
        ),
    )
