"""Start the runner as its own process and talk to it (handshake, signals, exit).

The runner gets its own session (``start_new_session``), so a dropped SSH link or a
Ctrl-C in the terminal never reaches it directly: the CLI decides what to forward.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

from soak.config import RunConfig


class RunnerStartError(RuntimeError):
    """The runner exited before creating a run directory (bad prompts, config)."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"runner exited with {returncode} before starting the run")
        self.returncode = returncode


@dataclass
class RunnerHandle:
    """A started runner process and its run directory."""

    proc: subprocess.Popen[bytes]
    run_dir: Path
    run_id: str

    @property
    def pid(self) -> int:
        """The runner's PID."""
        return self.proc.pid

    def signal(self, signum: int) -> None:
        """Forward a signal (ignored if the runner already ended)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    def poll(self) -> int | None:
        """The exit code, or None while running."""
        return self.proc.poll()


def start_runner(config: RunConfig) -> RunnerHandle:
    """Start ``python -m soak.runner`` with the config on stdin; wait for its handshake.

    The runner's stderr stays on ours until the handshake, so early errors (a bad prompt
    file) reach the operator; after it, the runner writes only to ``runner.log``.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "soak.runner"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(config.model_dump_json().encode())
        proc.stdin.close()
        line = proc.stdout.readline()
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        raise
    if not line:
        raise RunnerStartError(proc.wait())
    hello = orjson.loads(line)
    proc.stdout.close()
    return RunnerHandle(proc=proc, run_dir=Path(hello["run_dir"]), run_id=hello["run_id"])


class AttachedRunner:
    """A runner started by another soaktop (``soaktop attach``): found by the PID in its
    run directory. Same interface as :class:`RunnerHandle` for the followers."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.run_id = run_dir.name
        try:
            self.pid: int | None = int((run_dir / "runner.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            self.pid = None

    def alive(self) -> bool:
        """The runner process still runs (and is a soaktop runner, not a reused PID)."""
        import psutil

        if self.pid is None:
            return False
        try:
            proc = psutil.Process(self.pid)
            return proc.status() != psutil.STATUS_ZOMBIE and "soak.runner" in " ".join(
                proc.cmdline()
            )
        except psutil.Error:
            return False

    def signal(self, signum: int) -> None:
        """Send a signal to the runner if it still runs."""
        if self.pid is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def poll(self) -> int | None:
        """None while the runner runs; then the record's exit code, or -1 without one."""
        if self.alive():
            return None
        try:
            data = orjson.loads((self.run_dir / "record.json").read_bytes())
            return int(data.get("exit_code", 1))
        except (FileNotFoundError, orjson.JSONDecodeError):
            return -1
