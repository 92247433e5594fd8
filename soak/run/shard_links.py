"""The coordinator's side of each shard process (:mod:`soak.run.shards`).

- ``ShardLink``: one shard — its process and what it last reported (ready, heartbeat,
  done), its status (starting, running, done, lost), its socket samples and its clock
  offset;
- ``ShardProcess`` / ``ShardLauncher``: what the coordinator needs of a shard's process
  and how one is started (``local_launcher``: a child process on this host; a transport
  to other hosts supplies its own launcher and an object with the same surface);
- ``copy_shard_log``: its stderr into runner.log, bounded (``MAX_LOG_LINES``);
- ``shard_env``: the environment it is started with, without the header's secret;
- ``lost_words``: what the events say of a shard lost.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from loadgen.envelope import RequestResult
from soak.judge.shard_reasons import exit_words, shard_name
from soak.run.shard_protocol import READ_LIMIT
from soak.safe_text import safe_line

__all__ = [
    "MAX_LOG_LINES",
    "ShardLauncher",
    "ShardLink",
    "ShardProcess",
    "copy_shard_log",
    "local_launcher",
    "lost_words",
    "shard_env",
    "shift_result",
]

MAX_LOG_LINE_CHARS: Final = 4_000
"""Most characters of one stderr line copied (a traceback line is far shorter)."""
MAX_LOG_LINES: Final = 10_000
"""A shard's stderr lines copied into runner.log; the rest are counted (a shard that
warns on every request must not fill the run directory's disk)."""


class ShardInput(Protocol):
    """A shard's command pipe: lines written, never awaited (as a pipe's writer)."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` (whole protocol lines) for the shard."""


class ShardProcess(Protocol):
    """What the coordinator uses of a shard's process: the surface of
    :class:`asyncio.subprocess.Process` it touches, so a shard on another host (its
    transport's stand-in object) is driven exactly as a local child is."""

    @property
    def stdin(self) -> ShardInput | None:
        """The shard's commands (the spec first)."""

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        """The shard's protocol lines."""

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        """The shard's log lines (copied into runner.log)."""

    @property
    def pid(self) -> int:
        """The shard's process id (events only: it means nothing after the run)."""

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has exited, else None."""

    async def wait(self) -> int | None:
        """Wait for it to exit; its exit status (None: none came back, its host was
        lost)."""

    def kill(self) -> None:
        """End it now (the coordinator's last resort)."""


@dataclass
class ShardLink:
    """The coordinator's side of one shard: its process and what it last reported."""

    index: int
    workers: int
    proc: ShardProcess | None = None
    clock_offset_ns: int = 0
    """The shard's clock minus the coordinator's, ns (0 on one host: one monotonic
    clock). Every absolute time sent to the shard gets it added, every one received
    from it has it taken away (:meth:`to_shard`, :meth:`from_shard`)."""
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
    status: Literal["starting", "running", "done", "lost"] = "starting"
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

    def to_shard(self, ns: int) -> int:
        """A coordinator's clock reading, on the shard's clock."""
        return ns + self.clock_offset_ns

    def from_shard(self, ns: int) -> int:
        """A shard's clock reading, on the coordinator's clock."""
        return ns - self.clock_offset_ns

    def reported_ns(self, ns: Any) -> int | None:
        """An instant a shard reported, on the coordinator's clock (None: not one)."""
        return self.from_shard(ns) if isinstance(ns, int) and not isinstance(ns, bool) else None


RESULT_TIMES: Final = (
    "sent_ns", "first_byte_ns", "first_token_ns", "first_content_ns", "end_ns", "intended_ns",
)  # fmt: skip
"""A result's absolute times (``itl_ns`` are gaps: no clock in them)."""


def shift_result(r: RequestResult, offset_ns: int) -> None:
    """A result measured on a clock ``offset_ns`` ahead of the coordinator's, onto its
    clock (called only for a non-zero offset: one host pays nothing)."""
    for name in RESULT_TIMES:
        value = getattr(r, name)
        if value is not None:
            setattr(r, name, value - offset_ns)


ShardLauncher = Callable[[ShardLink, Mapping[str, str]], Awaitable[ShardProcess]]
"""Starts shard ``link.index`` with the environment given (secrets already taken out:
:func:`shard_env`) and returns its process; the coordinator writes the spec to its stdin
next. The default is :func:`local_launcher`."""


async def local_launcher(link: ShardLink, env: Mapping[str, str]) -> ShardProcess:
    """A shard as a child process of this runner: ``python -m soak.run.shard_main``."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "soak.run.shard_main",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=READ_LIMIT,
        env=dict(env),
    )


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


def shard_env(environ: Mapping[str, str], secret_vars: Iterable[str]) -> dict[str, str]:
    """The shard's environment: the runner's, less the variables named in ``secret_vars``
    (``loadgen.headers.secret_vars``: each ``--header`` ``env:`` source and
    ``--api-key-env``), by name only: the headers reach a shard on its stdin, and a
    process's environment is readable for its life (``/proc/PID/environ``). Never by a
    value's substring: a literal ``X-Tenant: team`` must not cost a shard ``HOME=/home/team``."""
    drop = set(secret_vars)
    return {k: v for k, v in environ.items() if k not in drop}


def lost_words(link: ShardLink, shards: int) -> str:
    """The event's words for a lost shard (the verdict's reason says the same)."""
    at = "" if link.lost_at_s is None else f" at {link.lost_at_s:.1f} s"
    return (
        f"{shard_name(link.index, shards)} lost ({exit_words(link.exit_code)}){at}: its "
        f"{link.workers} workers stopped; the other shards drain"
    )
