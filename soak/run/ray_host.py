"""The node side of a shard on Ray: :class:`ShardHost`, one small actor per shard.

It starts the ordinary shard process on its node (``python -m soak.run.shard_main``,
exactly as a local run does), writes the coordinator's command lines to its stdin and
hands its stdout and stderr back in batches: the coordinator long-polls :meth:`read`,
which returns every complete line since the last call, so one Ray call carries a batch
(a fraction of a second of results), never one request (DESIGN.md §10: Ray is the
control plane only). Everything the shard wrote on stdout is also teed into a journal
file on the node, with its sha256 and line count (:meth:`finish`): the coordinator
compares them with the bytes it received.

This module never imports Ray at its top: the class is made an actor by
:mod:`soak.run.ray_shards` (``ray.remote(ShardHost)``), and the default install (no
Ray) imports nothing of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

BATCH_S: Final = 0.1
"""After the first new bytes, how long :meth:`ShardHost.read` waits for more before it
answers (a batch per ~100 ms: at most ~10 Ray calls a second per shard)."""
CHUNK: Final = 1 << 16
ORPHAN_AFTER_S: Final = 15.0
"""No poll for this long: the coordinator is gone or cut off. The node then ends its
stdin (the shard aborts, as at its coordinator's end) and kills it :data:`ORPHAN_KILL_S`
later. Ray ends a dead driver's actors itself (within seconds, in the e2e test); this
holds where it does not (a driver cut off but not yet declared dead), so no load runs on
without a coordinator to journal it."""
ORPHAN_KILL_S: Final = 10.0
MAX_PENDING: Final = 1 << 28
"""Most unread stdout bytes held (256 MiB): a coordinator that stopped polling must not
exhaust the node's memory; past it the shard is killed (its loss is then named). Checked
as the bytes arrive, by the pipe's reader thread."""


def journal_dir() -> Path:
    """Where a node keeps its shards' stdout journals (``$TMPDIR/soaktop-shards``)."""
    return Path(tempfile.gettempdir()) / "soaktop-shards"


class _Pipe:
    """One of the shard's output pipes, read by a thread: complete lines for the
    coordinator, and (stdout) every byte teed to the journal and hashed."""

    def __init__(
        self,
        stream: IO[bytes],
        wake: threading.Condition,
        tee: IO[bytes] | None,
        on_overflow: Callable[[], None] | None = None,
    ):
        self.stream = stream
        self.wake = wake
        self.tee = tee
        self.on_overflow = on_overflow
        """Called (once) when more than :data:`MAX_PENDING` bytes wait unread."""
        self.overflowed = False
        self.sha = hashlib.sha256()
        self.lines = 0
        self.pending = bytearray()
        self.has_line = False
        """A complete line waits in :attr:`pending` (a partial one alone wakes nobody)."""
        self.ended = False
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        read = getattr(self.stream, "read1", self.stream.read)
        while chunk := read(CHUNK):
            if self.tee is not None:
                self.tee.write(chunk)
            self.sha.update(chunk)
            newlines = chunk.count(b"\n")
            self.lines += newlines
            with self.wake:
                self.pending += chunk
                self.has_line = self.has_line or newlines > 0
                over = len(self.pending) > MAX_PENDING and not self.overflowed
                if self.has_line:
                    self.wake.notify_all()
            # Here, not in read(): a coordinator that stopped polling calls no read.
            if over:
                self.overflowed = True
                if self.on_overflow is not None:
                    self.on_overflow()
        if self.tee is not None:
            self.tee.flush()
        with self.wake:
            self.ended = True
            self.wake.notify_all()

    def take(self) -> bytes:
        """Every complete line held (all of it once the pipe ended). Hold the lock."""
        cut = len(self.pending) if self.ended else self.pending.rfind(b"\n") + 1
        data = bytes(self.pending[:cut])
        del self.pending[:cut]
        self.has_line = False  # what is left holds no newline
        return data


class ShardHost:
    """One shard's process on this node, and the relay of its pipes (a threaded actor:
    :meth:`read` blocks while :meth:`write` runs)."""

    def __init__(self, index: int, run_name: str) -> None:
        self.index = index
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_name)[:200]
        self.journal = journal_dir() / safe / f"shard-{index}.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.wake = threading.Condition()
        self.out: _Pipe | None = None
        self.err: _Pipe | None = None
        self._tee: IO[bytes] | None = None
        self._polled = time.monotonic()
        """When the coordinator last polled (its long polls keep coming while it lives)."""

    def start(self) -> dict[str, Any]:
        """Start the shard process (its spec comes next, by :meth:`write`); where it runs."""
        import ray  # only ever called inside a Ray worker

        pid = self._spawn([sys.executable, "-m", "soak.run.shard_main"])
        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "pid": pid,
            "journal": str(self.journal),
        }

    def _spawn(self, argv: list[str]) -> int:
        """The process, its journal and its pipes' readers (no Ray here); its pid."""
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        self._tee = self.journal.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ),  # this node's environment: the coordinator's never travels
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out = _Pipe(self.proc.stdout, self.wake, self._tee, on_overflow=self.kill)
        self.err = _Pipe(self.proc.stderr, self.wake, None, on_overflow=self.kill)
        self._polled = time.monotonic()
        threading.Thread(target=self._watch, name="orphan-watch", daemon=True).start()
        return self.proc.pid

    def _watch(self) -> None:
        """End the shard when its coordinator stopped polling (see ORPHAN_AFTER_S)."""
        proc = self.proc
        assert proc is not None
        while proc.poll() is None:
            time.sleep(min(1.0, ORPHAN_AFTER_S / 4))
            if time.monotonic() - self._polled < ORPHAN_AFTER_S:
                continue
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()  # end of stdin: the shard aborts its load and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(ORPHAN_KILL_S)
            self.kill()
            return

    def clock(self) -> int:
        """This node's monotonic clock, ns (the coordinator's offset measurement)."""
        return time.perf_counter_ns()

    def write(self, data: bytes) -> bool:
        """Command lines to the shard's stdin; False once it is gone."""
        proc = self.proc
        if proc is None or proc.stdin is None:
            return False
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def read(self, wait_s: float) -> tuple[bytes, bytes, int | None]:
        """The shard's complete stdout and stderr lines since the last call, waiting up
        to ``wait_s`` for some (then :data:`BATCH_S` for more), and its exit status
        once it has exited and both pipes are read to their end."""
        out, err = self.out, self.err
        assert out is not None and err is not None and self.proc is not None
        self._polled = deadline = time.monotonic() + wait_s  # polling till then
        with self.wake:
            while not (out.has_line or err.has_line or (out.ended and err.ended)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.wake.wait(left)
        if not (out.ended and err.ended):
            time.sleep(BATCH_S)  # a batch per call: the results of the next ~100 ms too
        with self.wake:
            data, logs, ended = out.take(), err.take(), out.ended and err.ended
        rc = self.proc.wait() if ended else None
        self._polled = time.monotonic()
        return data, logs, rc

    def finish(self) -> dict[str, Any]:
        """The journal's sha256, lines and bytes (once the shard has exited)."""
        out = self.out
        assert out is not None
        out.thread.join(timeout=5)
        if self._tee is not None:
            with contextlib.suppress(OSError):
                self._tee.close()
        return {"sha256": out.sha.hexdigest(), "lines": out.lines, "path": str(self.journal)}

    def kill(self) -> None:
        """End the shard process now (the coordinator's last resort)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
