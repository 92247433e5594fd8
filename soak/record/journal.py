"""Append-only JSONL journals in the run directory, flushed line by line.

A crash, ``kill -9`` or power loss loses at most the line being written: every reader
here tolerates a truncated last line, and a full disk never leaves one (each line is one
``write(2)``; a failed or short write is cut back to the last whole line). Journal lines
are plain JSON objects so that any tool (jq, pandas) can read them without soaktop.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import orjson

from loadgen.envelope import RequestResult

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})
"""Write errors that mean the run directory's storage failed (full, over quota, broken,
read-only, over a file-size limit) — not a bug in soaktop."""


def storage_words(err: OSError) -> str:
    """An ``OSError`` from a write in words an operator acts on: ``disk full (ENOSPC: ...)``."""
    code = errno.errorcode.get(err.errno or 0, str(err.errno))
    what = {
        errno.ENOSPC: "disk full",
        errno.EDQUOT: "disk quota exceeded",
        errno.EIO: "I/O error",
        errno.EFBIG: "file size limit reached",
        errno.EROFS: "file system is read-only",
    }.get(err.errno or 0, "write failed")
    return f"{what} ({code}: {err.strerror or err})"


class JsonlWriter:
    """One journal file opened for append; every line is one ``write(2)``, so readers see
    it at once and a tail is never torn by soaktop.

    A write that fails (disk full, I/O error, quota) or writes only part of a line is cut
    back to the last whole line, and the journal turns *failed*: it calls ``on_error`` once
    (the runner then stops issuing and says why) and drops every later line, counting them
    in ``dropped``. The measuring path never sees an exception from a journal.
    """

    def __init__(
        self, path: Path, on_error: Callable[[JsonlWriter, OSError], None] | None = None
    ) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.lines = 0
        self.dropped = 0
        """Lines not written because the journal had failed."""
        self.error: OSError | None = None
        """The write error that failed this journal, if one did."""
        self.on_error = on_error

    def write(self, obj: Any) -> None:
        """Append one JSON object as a line."""
        self.write_raw(orjson.dumps(obj))

    def write_raw(self, line: bytes) -> None:
        """Append one pre-serialized JSON line (without its newline)."""
        fd = self._fd
        if fd is None:
            if self.error is not None:
                self.dropped += 1
                return
            raise ValueError(f"journal {self.path.name} is closed")
        data = line + b"\n"
        try:
            n = os.write(fd, data)
            while n < len(data):  # a short write (the disk ran out mid-line, a signal):
                w = os.write(fd, data[n:])  # the rest, or the real error (ENOSPC, EFBIG)
                if w == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                n += w
        except OSError as e:
            self._fail(e)
            return
        self._size += n
        self.lines += 1

    def _fail(self, err: OSError) -> None:
        """Cut the file back to its last whole line, close it and report once."""
        fd, self._fd = self._fd, None
        self.error = err
        self.dropped += 1
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.on_error is not None:
            self.on_error(self, err)

    def sync(self) -> None:
        """Push the file to disk (at phase boundaries, not per line)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                self._fail(e)

    def close(self) -> None:
        """Flush to disk and close; idempotent."""
        if self._fd is not None:
            self.sync()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


RESERVE_NAME = ".reserve"
"""The file that holds space for the final record (see :func:`reserve_space`)."""
RESERVE_BYTES = 512 * 1024
"""Space held for the end of the run: record.json (~10–200 KB), summary.csv, the last
snapshot and events. A soak record is bounded in size; 512 KiB leaves a wide margin."""


def reserve_space(run_dir: Path, nbytes: int = RESERVE_BYTES) -> None:
    """Hold ``nbytes`` of the run directory's file system for the final record.

    When the journals fill the disk, the runner deletes this file and writes its record
    into the space it freed. Raises ``OSError`` when the space is not there (the run must
    not start: it could not even say how it ended).
    """
    path = run_dir / RESERVE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            # No fallocate here (some network file systems): write the bytes. Random ones,
            # so a compressing file system (ZFS, btrfs) cannot store them as nothing.
            block = os.urandom(1 << 16)
            for _ in range(0, nbytes, len(block)):
                if os.write(fd, block) != len(block):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from None
        os.fsync(fd)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def release_reserve(run_dir: Path) -> bool:
    """Free the space held by :func:`reserve_space`; True if there was a reserve."""
    try:
        (run_dir / RESERVE_NAME).unlink()
    except FileNotFoundError:
        return False
    return True


class DropWriteErrors:
    """A text stream whose writes may fail — ``runner.log`` on a full disk, a hung-up
    terminal — without the failure escaping into the code that printed (a traceback
    printed from an ``except`` block must not cost the run its record)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write, or drop the text if the stream cannot take it."""
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        """Flush, unless the stream cannot."""
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding...: the stream's
        return getattr(self._stream, name)


def repair_tail(path: Path) -> bytes:
    """Cut a torn last line (a writer killed mid-line) off a journal; the bytes cut.

    soaktop's own writers never leave one (see :class:`JsonlWriter`); a ``kill -9`` of
    an older writer or a foreign tool might. Returns ``b""`` when the file ends with a
    newline (or is empty or missing).
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return b""
    if size == 0:
        return b""
    with path.open("rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return b""
        # Walk back in blocks to the last newline (a torn line is short: one record).
        end = size
        keep = 0
        while end > 0:
            start = max(0, end - (1 << 16))
            fh.seek(start)
            block = fh.read(end - start)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            end = start
        fh.seek(keep)
        torn = fh.read()
        fh.truncate(keep)
        return torn


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete JSON object line; a torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return  # the line being written when the writer died
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


class LineTail:
    """Follows a journal another process appends to: each call returns the complete lines
    (bytes, blank ones left out) appended since the last; a line still being written is
    read next time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new_lines(self) -> list[bytes]:
        """The lines appended since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [line for line in data[:end].splitlines() if line.strip()]


class JsonlTail(LineTail):
    """A :class:`LineTail` that returns the new lines parsed: those that are not JSON
    objects are skipped."""

    def read_new(self) -> list[dict[str, Any]]:
        """Complete JSON-object lines appended since the last call."""
        out = []
        for line in self.read_new_lines():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _rel_s(ns: int | None, origin_ns: int) -> float | None:
    return None if ns is None else (ns - origin_ns) / 1e9


def _dur_s(ns: int | None, sent_ns: int) -> float | None:
    return None if ns is None else (ns - sent_ns) / 1e9


def request_line(
    r: RequestResult, origin_ns: int, phase: str = "load", shard: int | None = None
) -> bytes:
    """The ``requests.jsonl`` line for one request: times in seconds, durations from sent.

    ``sent_s``/``end_s`` are seconds since the run's monotonic origin (lines up with events
    and telemetry); ``ttfb_s``, ``ttft_s``, ``first_content_s``, ``e2e_s`` are durations
    from ``sent``; ``itl_us`` are the inter-token gaps in whole microseconds.
    """
    line: dict[str, object] = {
        "id": r.request_id,
        "phase": phase,
        "worker": r.worker,
        "prompt": r.prompt_id,
        "ok": r.ok,
        "sent_s": _rel_s(r.sent_ns, origin_ns),
        "end_s": _rel_s(r.end_ns, origin_ns),
        "ttfb_s": _dur_s(r.first_byte_ns, r.sent_ns),
        "ttft_s": _dur_s(r.first_token_ns, r.sent_ns),
        "first_content_s": _dur_s(r.first_content_ns, r.sent_ns),
        "e2e_s": _dur_s(r.end_ns, r.sent_ns),
        "status": r.status,
        "failure": None if r.failure is None else str(r.failure),
        "detail": r.failure_detail,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "chunks": r.chunks,
        "finish": r.finish_reason,
        "cancelled": r.cancelled,
        "stale_retry": r.stale_retry,  # resent after a stale pooled connection
        "itl_us": [g // 1000 for g in r.itl_ns],
    }
    if r.sanity:  # only a flagged response: most lines stay as they were
        line["sanity"] = r.sanity
    if r.intended_ns is not None:  # open loop only: the schedule's time for this request
        line["intended_s"] = _rel_s(r.intended_ns, origin_ns)
    if r.workload_class is not None:  # a mixed load only (--mix)
        line["workload_class"] = r.workload_class
    if r.step is not None:  # a load with steps only (stages, sweep, live changes)
        line["step"] = r.step
    if r.turn is not None:  # a conversation load only (--turns)
        line["session"] = r.session
        line["turn"] = r.turn
        if r.answer_truncated:  # the next turn's history holds only the answer's head
            line["answer_truncated"] = True
    if r.queue_hits:  # the client found bytes waiting behind a read: it was behind
        line["queue_samples"] = r.queue_samples
        line["queue_hits"] = r.queue_hits
        line["queued_bytes_max"] = r.queued_bytes_max
    if shard is not None:  # a sharded run only (--shards): the shard that sent it
        line["shard"] = shard
    return orjson.dumps(line)
