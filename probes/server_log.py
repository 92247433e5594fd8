"""Server log: follow a file or a command's output and classify fault lines.

``classify`` turns one log line into a ``LogFault`` (CUDA illegal memory access, CUDA OOM,
other CUDA errors, Xid, NCCL error, engine death, engine error, Python traceback) or None.
It is called on every line of a busy server's log, so a line that is not a fault costs a
handful of substring checks; the detailed rules run only on the rare line that passes.

vLLM 0.32 writes ``(EngineCore_DP0 pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``;
a traceback logged by vLLM carries that prefix on every line, a bare one (a crash outside
the logger) carries none; kernel lines (``NVRM: Xid``) and NCCL lines have their own form.
INFO and DEBUG lines are never faults: with ``--enable-log-requests`` vLLM logs each
prompt at INFO, and a prompt may well quote a traceback. HTTP statuses in access lines
(``"POST /v1/chat/completions HTTP/1.1" 500``) are counted by the load client, not here.

One crash writes several fault lines (fatal error, traceback, the exception, the engine
client noticing); turning them into events (and folding repeats) is the caller's business.

``LogFollower`` reads a file the way ``tail -F`` does (waits for it, survives truncation
and rotation); ``CommandFollower`` runs ``docker logs -f NAME`` or ``journalctl -f -u
vllm`` and reads its output. Both hand out complete lines and bound what they hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from probes.xid import XID_ERROR_ONLY, xid_meaning

Severity = Literal["error", "critical"]

MAX_LINE_CHARS = 500
"""A fault keeps at most this much of its line (a traceback line can be huge)."""
_SCAN_CHARS = 8192
"""Only the head of a very long line is classified: the cost of a line stays bounded."""


@dataclass(frozen=True)
class LogFault:
    """One classified log line."""

    kind: str
    """Stable code: cuda_illegal_memory_access, cuda_oom, cuda_error, xid, nccl_error,
    engine_error, engine_dead or traceback."""
    severity: Severity
    """``critical``: the engine or the GPU is gone or unusable; ``error``: a fault the
    engine may survive (a traceback, an Xid the driver recovered from)."""
    summary: str
    """A few words for the event line, e.g. "Xid 79 on PCI:0000:3b:00: GPU fell off the bus"."""
    line: str
    """The line itself, stripped, at most ``MAX_LINE_CHARS`` characters."""


# What every line pays for: a few substring checks (about 1 µs for a typical line, a
# quarter of one regex alternation). Each key anchors one or more rules below; a line
# without any of them is not a fault.
_KEYS = (
    "CUDA",
    "OutOfMemory",
    "illegal memory",
    "cudaError",
    "Xid",
    "NCCL error",
    "NCCL WARN",
    "nccl",
    "collective operation timeout",
    "EngineCore",
    "EngineDead",
    "died",
    "failed",
    "WorkerProc",
    "Generator",
    "Traceback",
)

# The first level token of the line: vLLM's ``INFO 11-29 23:15:00`` or uvicorn's ``INFO:``.
_LEVEL = re.compile(
    r"(?:^|[\s)\]])(DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d|:\s)"
)


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):? (\d+)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_OOM_SIZE = re.compile(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B)")
_OOM_GPU = re.compile(r"GPU (\d+) has a total capacity")
_ILLEGAL = re.compile(r"illegal memory access|cudaErrorIllegalAddress")
_CUDA_ERROR = re.compile(r"CUDA error: ([^.\n]{1,80})")
_NCCL = re.compile(
    r"NCCL error|(nccl(?:InternalError|UnhandledCudaError|SystemError|InvalidUsage"
    r"|InvalidArgument|RemoteError))|collective operation timeout"
)
_NCCL_WARN = re.compile(r"NCCL WARN (.*)")
_NCCL_WARN_BAD = re.compile(r"[Ff]ail|[Ee]rror|[Tt]imed? ?out|[Aa]bort|status=[1-9]")
# NCCL warns about optional plugins and libraries on every healthy start.
_NCCL_WARN_BENIGN = re.compile(r"Failed to open lib|Could not find|NET/Plugin")
_CPU_GENERATOR = "CPU Generator does not use offset"

_ENGINE_DEAD: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"EngineCore encountered a fatal error"), "engine core hit a fatal error"),
    (
        re.compile(r"Engine core proc(?:ess)? (\S+) died unexpectedly"),
        "engine core {0} died unexpectedly",
    ),
    (re.compile(r"Engine core proc(?:ess)?\b.* died unexpectedly"), "engine core died"),
    (re.compile(r"AsyncLLM output_handler failed"), "engine output handler failed (engine dead)"),
    (re.compile(r"EngineDeadError|EngineCore encountered an issue"), "engine dead"),
    (re.compile(r"Worker ?[Pp]roc (\S+) died"), "worker {0} died"),
    (re.compile(r"WorkerProc\b.*\bdied|[Ww]orker died"), "worker process died"),
    (re.compile(r"WorkerProc hit an exception"), "worker process hit an exception"),
    (
        re.compile(
            r"WorkerProc failed to start|Engine process failed to start"
            r"|Engine core initialization failed"
        ),
        "engine failed to start",
    ),
)
"""(pattern, summary) in order; ``{0}`` takes the pattern's first group."""


def _bounded(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def classify(line: str) -> LogFault | None:
    """The fault this log line reports, or None (most lines)."""
    text = line if len(line) <= _SCAN_CHARS else line[:_SCAN_CHARS]
    for key in _KEYS:
        if key in text:
            break
    else:
        return None
    level = _LEVEL.search(text)
    if level is not None and level.group(1) in ("INFO", "DEBUG"):
        return None
    found = _match(text)
    if found is None:
        return None
    kind, severity, summary = found
    return LogFault(kind=kind, severity=severity, summary=summary, line=_bounded(line))


def _match(text: str) -> tuple[str, Severity, str] | None:
    # Most specific root cause first: an NCCL warning that quotes an illegal memory access
    # is the illegal memory access; a traceback header is the least specific of all.
    if m := _XID.search(text):
        xid, where = int(m.group(2)), m.group(1)
        meaning = xid_meaning(xid)
        severity: Severity = "error" if xid in XID_ERROR_ONLY else "critical"
        return "xid", severity, f"Xid {xid} on PCI:{where}: {meaning}"
    if _OOM.search(text):
        summary = "CUDA out of memory"
        if m := _OOM_SIZE.search(text):
            summary += f" (tried to allocate {m.group(1)})"
        if m := _OOM_GPU.search(text):
            summary += f" on GPU {m.group(1)}"
        return "cuda_oom", "critical", summary
    if _ILLEGAL.search(text):
        return "cuda_illegal_memory_access", "critical", "CUDA illegal memory access"
    if m := _CUDA_ERROR.search(text):
        return "cuda_error", "critical", f"CUDA error: {m.group(1).strip()}"
    if m := _NCCL.search(text):
        if m.group(1):
            return "nccl_error", "critical", f"NCCL error ({m.group(1)})"
        if "collective operation timeout" in m.group(0):
            return "nccl_error", "critical", "NCCL collective operation timed out"
        return "nccl_error", "critical", "NCCL error"
    if (m := _NCCL_WARN.search(text)) and _nccl_warn_is_error(m.group(1)):
        return "nccl_error", "critical", f"NCCL warning: {m.group(1).strip()[:60]}"
    if _CPU_GENERATOR in text:
        return "engine_error", "critical", f"engine crashed: {_CPU_GENERATOR} (seeded request)"
    for pattern, summary in _ENGINE_DEAD:
        if m := pattern.search(text):
            return "engine_dead", "critical", summary.format(*m.groups())
    if "Traceback (most recent call last):" in text:
        return "traceback", "error", "Python traceback"
    return None


def _nccl_warn_is_error(message: str) -> bool:
    return bool(_NCCL_WARN_BAD.search(message)) and not _NCCL_WARN_BENIGN.search(message)


class _Lines:
    """Bytes in, complete lines out; the partial last line waits for its newline. A line
    longer than ``max_line_bytes`` is cut there, so a log without newlines cannot grow
    the buffer without bound."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._buf += data
        *complete, rest = self._buf.split(b"\n")
        self._buf = bytearray(rest)
        out = [_decode(raw) for raw in complete]
        while len(self._buf) > self.max_line_bytes:
            out.append(_decode(self._buf[: self.max_line_bytes]))
            del self._buf[: self.max_line_bytes]
        return out

    def flush(self) -> list[str]:
        """The partial line as a line of its own (its file or stream has ended)."""
        if not self._buf:
            return []
        out = [_decode(self._buf)]
        self._buf.clear()
        return out


def _decode(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", errors="replace").rstrip("\r")


class LogFollower:
    """Follows a log file like ``tail -F``: new complete lines on each ``poll``.

    A file that does not exist yet is waited for. When the path's inode changes (rotated:
    renamed and recreated) the rest of the old file is read first, then the new file from
    its start; when the file shrinks (truncated, copytruncate rotation) reading restarts
    at its start. A file truncated and regrown past the read position between two polls
    cannot be told from one that grew; poll often enough for the log's rate.
    """

    def __init__(
        self,
        path: Path,
        start_at_end: bool = True,
        max_bytes_per_poll: int = 1 << 20,
        max_line_bytes: int = 64 << 10,
    ) -> None:
        """``start_at_end``: skip what the file holds now (the run's own lines only).
        ``max_bytes_per_poll``: a log storm is read over several polls instead of
        stalling the caller's loop in one."""
        self.path = Path(path)
        self.max_bytes_per_poll = max_bytes_per_poll
        self.reopened = 0
        """How often the file was found rotated or truncated."""
        self.error: str | None = None
        """Why the file is not being read now ("No such file or directory", "Permission
        denied"; the OS's words without the path); None while it is open."""
        self._lines = _Lines(max_line_bytes)
        self._fh: int | None = None
        self._pos = 0
        self._closed = False
        self._open(at_end=start_at_end)

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            self.error = e.strerror or type(e).__name__
            return False
        self.error = None
        self._fh = fd
        self._pos = os.lseek(fd, 0, os.SEEK_END) if at_end else 0
        return True

    def _drop(self) -> None:
        if self._fh is not None:
            os.close(self._fh)
            self._fh = None

    def _read(self, budget: int) -> tuple[list[str], int]:
        assert self._fh is not None
        data = os.pread(self._fh, budget, self._pos) if budget > 0 else b""
        self._pos += len(data)
        return self._lines.feed(data), len(data)

    def poll(self) -> list[str]:
        """Complete lines written since the last poll (never raises for a missing file)."""
        if self._closed:
            return []
        if self._fh is None and not self._open(at_end=False):
            return []
        assert self._fh is not None
        budget = self.max_bytes_per_poll
        current = os.fstat(self._fh)
        try:
            on_path = os.stat(self.path)
        except OSError:
            on_path = None
        same = on_path is not None and (on_path.st_ino, on_path.st_dev) == (
            current.st_ino,
            current.st_dev,
        )
        out: list[str] = []
        if same and current.st_size < self._pos:  # truncated in place
            self.reopened += 1
            out += self._lines.flush()
            self._pos = 0
        try:
            lines, n = self._read(budget)
            out += lines
            if same or self._pos < os.fstat(self._fh).st_size:
                return out  # the same file, or the old one still has bytes to give
            # Rotated or removed, and the old file is read to its end: move on.
            self.reopened += 1
            out += self._lines.flush()
            self._drop()
            if on_path is not None and self._open(at_end=False):
                out += self._read(budget - n)[0]
        except OSError as e:  # unreadable (a directory, a vanished mount): try again next poll
            self.error = e.strerror or type(e).__name__
            self._drop()
        return out

    @property
    def following(self) -> bool:
        """The file is open and was readable at the last poll."""
        return self._fh is not None and not self._closed

    def close(self) -> None:
        """Stop following; later polls return nothing."""
        self._closed = True
        self._drop()


class CommandFollower:
    """Runs a command that prints a server log (``docker logs -f NAME``, ``journalctl -f
    -u vllm``) and collects its stdout and stderr as lines.

    The command runs in its own process group, so ``close`` reaches what it started too.
    When it ends on its own, ``ended`` turns True and ``exit_message`` says how: the caller
    emits an event, since the log is no longer watched.
    """

    def __init__(
        self, argv: list[str], max_pending_lines: int = 10_000, max_line_bytes: int = 64 << 10
    ) -> None:
        if not argv:
            raise ValueError("CommandFollower needs a command")
        self.argv = list(argv)
        self.returncode: int | None = None
        """The command's exit status once it ended (negative: killed by that signal)."""
        self.error: str | None = None
        """Why the command could not be started."""
        self.dropped = 0
        """Lines dropped because nobody read them fast enough (the oldest go first)."""
        self.closed = False
        """``close`` was called: the end was asked for, not a fault."""
        self._pending: deque[str] = deque(maxlen=max_pending_lines)
        self._lines = _Lines(max_line_bytes)
        self._wake = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._ended = False

    @property
    def pid(self) -> int | None:
        """The command's pid (also its process group id), once started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def ended(self) -> bool:
        """The command exited (or never started) and all its output was collected."""
        return self._ended

    @property
    def exit_message(self) -> str | None:
        """How the command ended, in words; None while it runs."""
        if not self._ended:
            return None
        cmd = self.argv[0]
        if self.error is not None:
            return f"server log command {cmd!r} could not start: {self.error}"
        rc = self.returncode
        if rc is None:
            how = "stopped"
        elif rc < 0:
            how = f"was killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        return f"server log command {cmd!r} {how}" + (" on close" if self.closed else "")

    async def start(self) -> None:
        """Start the command; a command that cannot start ends at once (``error``)."""
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self.error = e.strerror or str(e)
            self._finish()
            return
        self._pump_task = asyncio.get_running_loop().create_task(
            self._pump(self._proc), name="server-log-command"
        )

    def _push(self, lines: list[str]) -> None:
        for line in lines:
            if len(self._pending) == self._pending.maxlen:
                self.dropped += 1
            self._pending.append(line)
        if lines:
            self._wake.set()

    def _finish(self) -> None:
        self._ended = True
        self._wake.set()

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while data := await proc.stdout.read(64 << 10):
                self._push(self._lines.feed(data))
            self._push(self._lines.flush())
            self.returncode = await proc.wait()
        finally:
            self._finish()

    def poll(self) -> list[str]:
        """The lines that arrived since the last poll."""
        out = list(self._pending)
        self._pending.clear()
        return out

    async def lines(self) -> AsyncIterator[str]:
        """Each line as it arrives, until the command has ended and all are handed out."""
        while True:
            while self._pending:
                yield self._pending.popleft()
            if self._ended:
                return
            self._wake.clear()
            await self._wake.wait()

    async def wait(self) -> int | None:
        """Wait until the command ended; its exit status (None: it never started)."""
        while not self._ended:
            self._wake.clear()
            await self._wake.wait()
        return self.returncode

    async def close(self, grace_s: float = 2.0) -> None:
        """Stop the command: SIGTERM to its process group, SIGKILL after ``grace_s``."""
        self.closed = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._signal(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                self._signal(proc, signal.SIGKILL)
                await proc.wait()
        if self._pump_task is not None:
            # A grandchild that kept the pipe open would hold the pump at its read.
            _, pending = await asyncio.wait({self._pump_task}, timeout=grace_s)
            for task in pending:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if self.returncode is None and proc is not None:
                self.returncode = proc.returncode
        self._finish()

    @staticmethod
    def _signal(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # the group: start_new_session made pid its id
