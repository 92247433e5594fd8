"""Pane 4's shard lines: each load shard of a sharded run, or one worst-first summary.

The snapshot's ``shards`` (:class:`soak.record.snapshot.ShardNow`) says each shard's
status and, for a running one that looks unhealthy, why (``warning``); this module only
words and colours them. Each state has its own word, so it reads without colour:
``ok``, ``LOST``, ``lag!`` / ``behind!`` / ``silent!``, ``start``, ``done``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from textual.content import Content

from soak.record.snapshot import ShardNow
from tui.fmt import count, secs
from tui.glyphs import Glyphs
from tui.panes.base import fit, line, muted

_STYLES = {
    "ok": "$text-success",
    "LOST": "bold $text-error",
    "start": "dim",
    "done": "dim",
}
_WARN_STYLE = "bold $text-warning"
_RANK = {"LOST": 0, "start": 3, "done": 4, "ok": 5}
"""Worst first in the summary (a warning ranks 1)."""


def shard_word(s: ShardNow) -> str:
    """The shard's state in one word."""
    if s.status == "lost":
        return "LOST"
    if s.status == "starting":
        return "start"
    if s.status == "done":
        return "done"
    if s.warning:  # its first word (a snapshot file's blank one: still a warning)
        return (s.warning.split() or ["warn"])[0] + "!"
    return "ok"


def _style(word: str) -> str:
    return _STYLES.get(word, _WARN_STYLE)


def shard_line(s: ShardNow, width: int, g: Glyphs) -> Content:
    """``s0 ok      in 127 done 4210 lag 3.1ms`` and, after, a warning's words."""
    word = shard_word(s)
    parts: list[str | tuple[str, str]] = [
        (f"s{s.index:<2} ", "bold"),
        (f"{word:<8}", _style(word)),
        muted("in "),
        f"{count(s.in_flight, g):>4}",
        muted(" done "),
        f"{count(s.requests, g):>6}",
    ]
    if width >= 44:
        parts += [muted(" lag "), secs(s.loop_lag_p99_s, g)]
    if s.warning and width >= 56:
        parts.append(muted(f" ({s.warning})"))
    return fit(line(*parts), width, g)


def shard_summary(shards: Sequence[ShardNow], width: int, g: Glyphs) -> Content:
    """``shards 8: LOST s3 · lag! s5 · ok 6``: the unhealthy ones by name, worst first;
    the rest counted by state."""
    named = sorted(
        (s for s in shards if shard_word(s) not in ("ok", "done", "start")),
        key=lambda s: (_RANK.get(shard_word(s), 1), s.index),
    )
    parts: list[str | tuple[str, str]] = [muted(f"shards {len(shards)}:")]
    for s in named:
        word = shard_word(s)
        parts += [" ", (word, _style(word)), f" s{s.index}"]
    shown = {s.index for s in named}
    tally = Counter(shard_word(s) for s in shards if s.index not in shown)
    for word in ("ok", "start", "done"):
        if tally[word]:
            parts += [" ", (word, _style(word)), f" {tally[word]}"]
    return fit(line(*parts), width, g)


def shard_rows(shards: Sequence[ShardNow], width: int, room: int, g: Glyphs) -> list[Content]:
    """One line per shard when ``room`` lines hold them all, else the summary."""
    if not shards:
        return []
    if len(shards) <= room:
        return [shard_line(s, width, g) for s in shards]
    return [shard_summary(shards, width, g)]
