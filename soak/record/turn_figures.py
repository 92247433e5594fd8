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
failures) is left at zero in the slices. One pass over the journal for the sessions,
one per turn for the figures (``turns`` is at most ``soak.run.config_turns.MAX_TURNS``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from loadgen.stats import PercentileMethod
from soak.record.journal import read_jsonl
from soak.record.models import LoadSummary, SessionFigures, TurnFigures
from soak.record.summary import LoadTiming, summarize_load

__all__ = ["conversation_fields", "turn_figures"]


@dataclasses.dataclass
class _Sessions:
    """One pass over the judged load lines of a conversation load."""

    issued: Counter[int] = dataclasses.field(default_factory=Counter)
    """Lines per turn index."""
    truncated: Counter[int] = dataclasses.field(default_factory=Counter)
    """Answers cut at the history bound, per turn index."""
    last: dict[int, tuple[int, bool]] = dataclasses.field(default_factory=dict)
    """Session → (its last turn journaled, that turn ok), for sessions begun in the load."""


def _read_sessions(requests_path: Path) -> _Sessions:
    out = _Sessions()
    last = out.last
    for line in read_jsonl(requests_path):
        turn = line.get("turn")
        if line.get("phase", "load") != "load" or not isinstance(turn, int):
            continue
        out.issued[turn] += 1
        if line.get("answer_truncated"):
            out.truncated[turn] += 1
        session = line.get("session")
        if isinstance(session, int) and (turn == 1 or session in last):
            # A session's turns are sequential: its lines come in turn order.
            last[session] = (turn, bool(line.get("ok")))
    return out


def _of_turn(index: int) -> Callable[[dict[str, Any]], bool]:
    """The journal lines of turn ``index``."""
    return lambda line: line.get("turn") == index


def turn_figures(
    requests_path: Path,
    load: LoadSummary,
    method: PercentileMethod,
    turns: int,
    think_time_s: float,
) -> tuple[list[TurnFigures], SessionFigures]:
    """Per-turn figures and the session counts of a conversation load (module doc)."""
    seen = _read_sessions(requests_path)
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
                load=summarize_load(requests_path, sliced, method, keep=_of_turn(index)),
            )
        )
    sessions = SessionFigures(
        turns=turns,
        think_time_s=think_time_s,
        started=len(seen.last),
        completed=completed,
        ended_early=sum(ended.values()),
        ended_early_by_turn={str(t): n for t, n in sorted(ended.items())},
        unfinished=unfinished,
        history_truncated=sum(seen.truncated.values()),
    )
    return figures, sessions


def conversation_fields(
    requests_path: Path,
    config: Mapping[str, Any],
    load: LoadSummary | None,
    method: PercentileMethod,
) -> dict[str, Any]:
    """The record's ``turns`` and ``sessions`` for a conversation load (``config`` is the
    run's ``config.json``: ``turns`` > 1), to pass to ``RunRecord``; empty otherwise, so
    a load of single requests writes neither key."""
    turns = config.get("turns")
    if load is None or not isinstance(turns, int) or turns < 2:
        return {}
    think = config.get("think_time_s")
    figures, sessions = turn_figures(
        requests_path, load, method, turns, float(think) if think is not None else 0.0
    )
    return {"turns": figures, "sessions": sessions}
