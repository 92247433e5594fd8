"""A replica's server log in vLLM's format, one flushed line at a time.

vLLM 0.32 prefixes each line with the process that wrote it (``(APIServer pid=N)`` or
``(EngineCore_DP0 pid=N)``), then ``LEVEL MM-DD HH:MM:SS [file.py:line] message``. soaktop's
log follower classifies these lines (engine death, CUDA errors, Xid), so the simulator
writes the same words a real server would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TextIO


class ReplicaLog:
    """Append-only, line-buffered log file of one replica."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO | None = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self.pid = os.getpid()

    def write(self, level: str, where: str, message: str, proc: str = "APIServer") -> None:
        """One log line, flushed (the file is line buffered)."""
        if self._fh is None:
            return
        stamp = time.strftime("%m-%d %H:%M:%S")
        self._fh.write(f"({proc} pid={self.pid}) {level} {stamp} [{where}] {message}\n")

    def info(self, where: str, message: str, proc: str = "APIServer") -> None:
        """An INFO line."""
        self.write("INFO", where, message, proc)

    def warning(self, where: str, message: str, proc: str = "APIServer") -> None:
        """A WARNING line."""
        self.write("WARNING", where, message, proc)

    def error(self, where: str, message: str, proc: str = "APIServer") -> None:
        """An ERROR line."""
        self.write("ERROR", where, message, proc)

    def raw(self, line: str) -> None:
        """A line without vLLM's prefix (kernel messages, tracebacks)."""
        if self._fh is not None:
            self._fh.write(line.rstrip("\n") + "\n")

    def close(self) -> None:
        """Close the file; later writes are dropped."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
