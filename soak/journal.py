"""Append-only JSONL journals in the run directory, flushed line by line.

A crash, ``kill -9`` or power loss loses at most the line being written: every reader
here tolerates a truncated last line. Journal lines are plain JSON objects so that any
tool (jq, pandas) can read them without soaktop.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from loadgen.envelope import RequestResult


class JsonlWriter:
    """One journal file opened for append; ``write`` flushes so readers see it at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = path.open("ab", buffering=0)
        self.lines = 0

    def write(self, obj: Any) -> None:
        """Append one JSON object as a line."""
        if self._fh is None:
            raise ValueError(f"journal {self.path.name} is closed")
        self._fh.write(orjson.dumps(obj) + b"\n")
        self.lines += 1

    def write_raw(self, line: bytes) -> None:
        """Append one pre-serialized JSON line (without its newline)."""
        if self._fh is None:
            raise ValueError(f"journal {self.path.name} is closed")
        self._fh.write(line + b"\n")
        self.lines += 1

    def sync(self) -> None:
        """Push the file to disk (at phase boundaries, not per line)."""
        if self._fh is not None:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Flush to disk and close; idempotent."""
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None


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


class JsonlTail:
    """Follows a journal another process appends to: each call returns the new lines.

    Only complete lines are consumed; a line still being written is read next time.
    Lines that are not JSON objects are skipped.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        """Complete JSON-object lines appended since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        out = []
        for line in data[:end].splitlines():
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


def request_line(r: RequestResult, origin_ns: int, phase: str = "load") -> bytes:
    """The ``requests.jsonl`` line for one request: times in seconds, durations from sent.

    ``sent_s``/``end_s`` are seconds since the run's monotonic origin (lines up with events
    and telemetry); ``ttfb_s``, ``ttft_s``, ``first_content_s``, ``e2e_s`` are durations
    from ``sent``; ``itl_us`` are the inter-token gaps in whole microseconds.
    """
    return orjson.dumps(
        {
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
            "itl_us": [g // 1000 for g in r.itl_ns],
        }
    )
