"""A mixed load's figures per workload class, from ``requests.jsonl`` (the record's
``classes``): computed by finalize, by ``soaktop recover`` and again by ``soaktop verify``.

Each class's figures are :func:`soak.record.summary.summarize_load` sliced to its journal
lines (``workload_class == name``), so every figure, failure class and sanity counter the
load has, the class has too, and the classes' counts (completed, failed, cancelled,
tokens, failures by class) sum to the load's. The timing is the load's, but for what only
the whole load has: ``issued`` is the class's own journaled requests, and the counts of
things no class owns (backoffs, worker errors, arrivals held by the cap) and the open
loop's schedule figures (offered rate, lateness) stay in the load's figures alone.

The classes and their weights come from the config as the run wrote it (``config.mix``),
so a record can be recomputed with no mix file at hand. Every class is measured in one
read of the journal (:class:`ClassTallies`; with the whole load and the other slices:
:mod:`soak.judge.load_pass`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.stats import PercentileMethod
from soak.record.models import WorkloadClassFigures
from soak.record.summary import KeyedTallies, LoadTally, LoadTiming, read_load
from soak.record.tally_samples import ItlShare, ShareJoin

__all__ = [
    "ClassTallies",
    "class_figures",
    "class_lines",
    "class_section",
    "class_timing",
    "mix_classes",
]


def mix_classes(config: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(name, weight)`` of each class of the run's mix (``config.mix``), in file order;
    empty for a load without one."""
    mix = config.get("mix")
    if not isinstance(mix, Mapping):
        return []
    return [(str(c["name"]), float(c["weight"])) for c in mix.get("classes") or []]


def class_timing(timing: LoadTiming, issued: int) -> LoadTiming:
    """The load's timing as one class's slice of it (module docstring)."""
    return dataclasses.replace(
        timing,
        issued=issued,
        backoffs=0,
        worker_errors={},
        offered_rate=None,
        held_by_cap=0,
    )


def class_figures(
    requests_path: Path,
    timing: LoadTiming | None,
    classes: list[tuple[str, float]],
    method: PercentileMethod = "nearest-rank",
) -> list[WorkloadClassFigures]:
    """Each class's figures (empty without classes, or when no load ran), from one read
    of the journal (:class:`ClassTallies`)."""
    if not classes or timing is None:
        return []
    tallies = ClassTallies(timing, classes)
    read_load(requests_path, [tallies.offer])
    return tallies.figures(method)


class ClassTallies:
    """Every class's tally for one read of the journal (each load line goes to its
    class's by one look-up of ``workload_class``), and their figures after it. A class
    costs a tally (:class:`LoadTally`: its latency samples) for the length of the read;
    the classes partition the load, so all of them together hold about what the whole
    load's does."""

    def __init__(
        self,
        timing: LoadTiming,
        classes: list[tuple[str, float]],
        share: ItlShare | None = None,
    ) -> None:
        self.timing = timing
        self.classes = classes
        share = share if share is not None else ItlShare()
        # A class's own timing has no schedule (module docstring): its tally none either.
        unscheduled = class_timing(timing, 0)
        self.tallies = {name: LoadTally.for_timing(unscheduled, share) for name, _ in classes}
        self._keyed = KeyedTallies("workload_class", self.tallies)
        self.offer = self._keyed.offer

    def begin_later_range(self) -> None:
        """A class is a line's own field: nothing of the lines before a range."""

    def part(self) -> dict[Any, LoadTally]:
        """The classes' tallies, to be sent back by a later range's reader."""
        return self._keyed.part()

    def join(self, part: dict[Any, LoadTally], shares: ShareJoin) -> None:
        """A later range's classes (:meth:`part`) joined into these, class by class."""
        self._keyed.join(part, shares)

    def figures(self, method: PercentileMethod) -> list[WorkloadClassFigures]:
        """Each class's figures, in the mix's order; ``issued`` is the class's lines."""
        out = []
        for name, weight in self.classes:
            tally = self.tallies[name]
            load = tally.summary(class_timing(self.timing, tally.lines), method)
            out.append(WorkloadClassFigures(name=name, weight=weight, load=load))
        return out


def class_section(classes: Sequence[WorkloadClassFigures]) -> dict[str, Any]:
    """The record's ``classes`` key, for a mixed load only (absent otherwise)."""
    return {"classes": list(classes)} if classes else {}


def class_lines(classes: list[WorkloadClassFigures], flag: str = "") -> list[str]:
    """The per-class table of the CLI's final report (``flag`` after each latency and
    throughput: ``(invalid)`` when the run is not a measurement)."""
    if not classes:
        return []
    total = sum(c.weight for c in classes) or 1.0
    out = ["  class        share  done  failed  out tok/s   P99 TTFT    P99 E2E  failures by class"]
    for c in classes:
        ld = c.load
        fails = ", ".join(f"{n} {k}" for k, n in ld.failures_by_class.items()) or "—"
        out.append(
            f"  {c.name:<12} {c.weight / total:>4.0%} {ld.completed:>5} {ld.failed:>7} "
            f"{_f(ld.output_tokens_per_s, '{:.1f}'):>10} {_f(ld.ttft_s.p99, '{:.3f} s'):>10} "
            f"{_f(ld.e2e_s.p99, '{:.3f} s'):>10}{flag}  {fails}"
        )
    return out


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else fmt.format(v)
