"""A conversation load's figures per turn index, and what its sessions became.

From ``requests.jsonl`` alone (each line of a ``--turns`` load carries its ``session``
and ``turn``; ``loadgen.conversation``), so the runner's record, ``soaktop recover`` and
``soaktop verify`` compute the same thing:

- ``turns``: one :class:`~soak.record.models.TurnFigures` per turn index, its figures
  :func:`~soak.record.summary.summarize_load` sliced to the lines of that turn. The
  turns' issued/completed/failed/cancelled sum to the load's; TTFT and E2E per turn show
  what the growing history costs, and ``input_tokens_mean`` shows the history growing.
- ``sessions``: the sessions whose turn 1 is in the judged load (a session begun in the
  warm-up is left out of these counts, its later turns are still in ``turns``):
  completed (every turn ok), ended early (a turn failed or was cut: by turn), unfinished
  (the issue window ended before its last turn was sent).

A turn's slice is measured over the load's own window (every turn is sent in it); what
belongs to the load as a whole and not to one turn (backoffs, lost workers, start
failures) is left at zero in the slices. One read of the journal for the sessions and
every turn (:class:`TurnTallies`; with the whole load and the other slices:
:mod:`soak.judge.load_pass`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.stats import PercentileMethod
from soak.record.models import LoadSummary, SessionFigures, TurnFigures
from soak.record.summary import KeyedTallies, LoadTally, LoadTiming, read_load
from soak.record.tally_samples import ItlShare, ShareJoin

__all__ = ["TurnTallies", "conversation_fields", "conversation_tallies", "turn_figures"]


@dataclasses.dataclass
class _Sessions:
    """One pass over the judged load lines of a conversation load."""

    issued: Counter[int] = dataclasses.field(default_factory=Counter)
    """Lines per turn index."""
    truncated: Counter[int] = dataclasses.field(default_factory=Counter)
    """Answers cut at the history bound, per turn index."""
    last: dict[int, tuple[int, bool]] = dataclasses.field(default_factory=dict)
    """Session → (its last turn journaled, that turn ok), for sessions begun in the load."""
    begun_before: dict[int, tuple[int, bool]] | None = None
    """A later byte range's reader only (:mod:`soak.record.split_read`): the last turn of
    each session whose turn 1 this range has not seen — begun in an earlier range (then
    its join counts it) or in the warm-up (then nothing does, as in one read)."""

    def add(self, line: dict[str, Any]) -> None:
        """One judged load line."""
        turn = line.get("turn")
        if not isinstance(turn, int):
            return
        self.issued[turn] += 1
        if line.get("answer_truncated"):
            self.truncated[turn] += 1
        session = line.get("session")
        last = self.last
        if isinstance(session, int):
            ok = bool(line.get("ok"))
            if turn == 1 or session in last:
                # A session's turns are sequential: its lines come in turn order.
                last[session] = (turn, ok)
            elif self.begun_before is not None:
                self.begun_before[session] = (turn, ok)

    def join(self, later: _Sessions) -> None:
        """A later range's sessions added, as one read would have met its lines here: a
        session it saw begin is its own; one it did not is this read's, if begun here."""
        self.issued.update(later.issued)
        self.truncated.update(later.truncated)
        for session, seen in (later.begun_before or {}).items():
            if session in self.last:
                self.last[session] = seen
        self.last.update(later.last)  # lines after the turn 1 they saw: later still


class TurnTallies:
    """Every turn index's tally and the sessions, for one read of the journal (each load
    line goes to its turn's tally by one look-up of ``turn``), and their figures after
    it. A turn costs a tally (:class:`LoadTally`: its latency samples) for the length
    of the read; the turns partition the load. ``whole`` is the timing the load is
    measured over (the tallies need its issue window's end and whether it is an open
    loop's); the slices' own timings come from the load's summary once it is known."""

    def __init__(
        self, whole: LoadTiming, turns: int, think_time_s: float, share: ItlShare | None = None
    ) -> None:
        self.turns = turns
        self.think_time_s = think_time_s
        self.sessions = _Sessions()
        share = share if share is not None else ItlShare()
        self.tallies = {i: LoadTally.for_timing(whole, share) for i in range(1, turns + 1)}
        by_turn = KeyedTallies("turn", self.tallies).offer
        add_session = self.sessions.add

        def offer(line: dict[str, Any]) -> None:
            add_session(line)
            by_turn(line)

        self.offer = offer

    def begin_later_range(self) -> None:
        """A session begun before the range is known only at the join: keep its turns."""
        self.sessions.begun_before = {}

    def part(self) -> tuple[_Sessions, dict[int, LoadTally]]:
        """The sessions and each turn's tally, to be sent back by a later range's reader."""
        return self.sessions, self.tallies

    def join(self, part: tuple[_Sessions, dict[int, LoadTally]], shares: ShareJoin) -> None:
        """A later range's sessions and turns (:meth:`part`) joined into these."""
        sessions, tallies = part
        self.sessions.join(sessions)
        for index, tally in self.tallies.items():
            tally.join(tallies[index], shares)

    def figures(
        self, load: LoadSummary, method: PercentileMethod
    ) -> tuple[list[TurnFigures], SessionFigures]:
        """Per-turn figures and the session counts (module doc), ``load`` the whole
        load's summary (each turn's timing is its own slice of it)."""
        seen, turns = self.sessions, self.turns
        ended: Counter[int] = Counter()
        completed = unfinished = 0
        for last_turn, ok in seen.last.values():
            if not ok:
                ended[last_turn] += 1
            elif last_turn >= turns:
                completed += 1
            else:
                unfinished += 1
        timing = LoadTiming.from_summary(load)
        figures = []
        for index in range(1, turns + 1):
            sliced = dataclasses.replace(
                timing, issued=seen.issued[index], backoffs=0, worker_errors={},
                worker_start_failures={},
            )  # fmt: skip
            figures.append(
                TurnFigures(
                    index=index,
                    sessions_ended=ended[index],
                    history_truncated=seen.truncated[index],
                    load=self.tallies[index].summary(sliced, method),
                )
            )
        sessions = SessionFigures(
            turns=turns,
            think_time_s=self.think_time_s,
            started=len(seen.last),
            completed=completed,
            ended_early=sum(ended.values()),
            ended_early_by_turn={str(t): n for t, n in sorted(ended.items())},
            unfinished=unfinished,
            history_truncated=sum(seen.truncated.values()),
        )
        return figures, sessions

    def fields(self, load: LoadSummary, method: PercentileMethod) -> dict[str, Any]:
        """The record's ``turns`` and ``sessions`` (for ``RunRecord``)."""
        figures, sessions = self.figures(load, method)
        return {"turns": figures, "sessions": sessions}


def turn_figures(
    requests_path: Path,
    load: LoadSummary,
    method: PercentileMethod,
    turns: int,
    think_time_s: float,
) -> tuple[list[TurnFigures], SessionFigures]:
    """Per-turn figures and the session counts of a conversation load (module doc), from
    one read of the journal."""
    tallies = TurnTallies(LoadTiming.from_summary(load), turns, think_time_s)
    read_load(requests_path, [tallies.offer])
    return tallies.figures(load, method)


def conversation_tallies(
    config: Mapping[str, Any], whole: LoadTiming | None, share: ItlShare | None = None
) -> TurnTallies | None:
    """The tallies of a conversation load (``config`` is the run's ``config.json``:
    ``turns`` > 1) measured over ``whole``; None for any other load (or none)."""
    turns = config.get("turns")
    if whole is None or not isinstance(turns, int) or turns < 2:
        return None
    think = config.get("think_time_s")
    return TurnTallies(whole, turns, float(think) if think is not None else 0.0, share)


def conversation_fields(
    requests_path: Path,
    config: Mapping[str, Any],
    load: LoadSummary | None,
    method: PercentileMethod,
) -> dict[str, Any]:
    """The record's ``turns`` and ``sessions`` for a conversation load (``config`` is the
    run's ``config.json``: ``turns`` > 1), to pass to ``RunRecord``; empty otherwise, so
    a load of single requests writes neither key."""
    if load is None:
        return {}
    tallies = conversation_tallies(config, LoadTiming.from_summary(load))
    if tallies is None:
        return {}
    read_load(requests_path, [tallies.offer])
    return tallies.fields(load, method)
