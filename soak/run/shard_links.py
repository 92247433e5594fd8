"""The coordinator's side of each shard process (:mod:`soak.run.shards`).

- ``ShardLink``: one shard — its process and what it last reported (ready, heartbeat,
  done), its status (starting, running, done, lost) and its socket samples;
- ``copy_shard_log``: its stderr into runner.log, bounded (``MAX_LOG_LINES``);
- ``shard_env``: the environment it is started with, without the header's secret;
- ``lost_words``: what the events say of a shard lost.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from soak.judge.shard_reasons import shard_name
from soak.safe_text import safe_line

__all__ = ["MAX_LOG_LINES", "ShardLink", "copy_shard_log", "lost_words", "shard_env"]

MAX_LOG_LINE_CHARS: Final = 4_000
"""Most characters of one stderr line copied (a traceback line is far shorter)."""
MAX_LOG_LINES: Final = 10_000
"""A shard's stderr lines copied into runner.log; the rest are counted (a shard that
warns on every request must not fill the run directory's disk)."""


@dataclass
class ShardLink:
    """The coordinator's side of one shard: its process and what it last reported."""

    index: int
    workers: int
    proc: asyncio.subprocess.Process | None = None
    ready: dict[str, Any] | None = None
    beat: dict[str, Any] = field(default_factory=dict)
    """The last heartbeat (or ``done``): in_flight, issued, lag, CPU."""
    done: dict[str, Any] | None = None
    released_ns: int | None = None
    """When it released its workers (its own report)."""
    issue_ended: bool = False
    issue_reason: str | None = None
    """Why it ended its issue window itself (its share of ``--max-requests``)."""
    requests: int = 0
    """Result lines received (each one a journal line with this ``shard``)."""
    status: str = "starting"
    """starting, running, done or lost."""
    exit_code: int | None = None
    lost_at_s: float | None = None
    in_flight_at_loss: int | None = None
    lags: list[float] = field(default_factory=list)
    """Its loop lag per report while loading (the record's ``loop_lag_p99_s``)."""
    q_samples: int = 0
    q_hits: int = 0
    """Its socket samples (and those that found bytes queued) as last reported."""
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the process has exited and its output is read."""


async def copy_shard_log(
    name: str, stream: asyncio.StreamReader, max_lines: int = MAX_LOG_LINES
) -> None:
    """A shard's stderr into runner.log (``print``: redacted like every line printed
    there), each line prefixed with ``name``: at most ``max_lines`` lines, and a line
    longer than the stream's limit is dropped in words, never an error that ends the
    copy (the shard would block on a full pipe)."""
    copied = dropped = 0
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # over the limit: the reader has discarded it
            line, text = b"-", "a stderr line over the read limit, dropped"
        else:
            if not line:
                break
            # A shard's traceback can quote a server's text: shown safe, and bounded.
            text = safe_line(line.decode("utf-8", "replace").rstrip()[:MAX_LOG_LINE_CHARS])
        if copied >= max_lines:
            dropped += 1
            continue
        copied += 1
        print(f"{name}: {text}", file=sys.stderr)
    if dropped:
        print(f"{name}: {dropped} more stderr lines not copied", file=sys.stderr)


def shard_env(environ: Mapping[str, str], headers: Mapping[str, str]) -> dict[str, str]:
    """The shard's environment: the runner's, less every variable that holds a header's
    secret (``--api-key-env``'s key): the headers reach a shard on its stdin only, and a
    process's environment is readable for its life (``/proc/PID/environ``)."""
    secrets = {v.removeprefix("Bearer ").strip() for v in headers.values()}
    secrets = {s for s in secrets if len(s) >= 4}
    return {k: v for k, v in environ.items() if not any(s in v for s in secrets)}


def lost_words(link: ShardLink, shards: int) -> str:
    """The event's words for a lost shard (the verdict's reason says the same)."""
    at = "" if link.lost_at_s is None else f" at {link.lost_at_s:.1f} s"
    return (
        f"{shard_name(link.index, shards)} lost (exit {link.exit_code}){at}: its "
        f"{link.workers} workers stopped; the other shards drain"
    )
