"""Start the runner as its own process and talk to it (handshake, signals, exit).

The runner gets its own session (``start_new_session``), so a dropped SSH link or a
Ctrl-C in the terminal never reaches it directly: the CLI decides what to forward. A
``soaktop run`` runner outlives its CLI on purpose (a soak survives the operator's SSH
link); a demo's runner is tied to the demo (:func:`runners_end_with_this_process`),
because the demo's engine ends with the demo.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from soak.run.config import RunConfig


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


_tied_to: list[int] = []
"""Read ends of lifeline pipes (``soak.cli.demo.Lifeline``) that runners started now get."""
_tied_runners: list[subprocess.Popen[bytes]] = []
"""Runners started with a lifeline (so the lifeline's owner can wait for their records)."""


@contextlib.contextmanager
def runners_end_with_this_process(lifeline_fd: int) -> Iterator[None]:
    """Runners started inside the block abort when this process ends, however it ends
    (``kill -9`` included): they get ``lifeline_fd``, the read end of a pipe whose write
    end only this process holds, and stop at its end-of-file (``--lifeline-fd``)."""
    _tied_to.append(lifeline_fd)
    try:
        yield
    finally:
        _tied_to.remove(lifeline_fd)


def wait_for_tied_runners(timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) for the tied runners still running: once their
    lifeline is closed they abort and write their records."""
    deadline = time.monotonic() + timeout_s
    for proc in _tied_runners:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    _tied_runners[:] = [p for p in _tied_runners if p.poll() is None]


def start_runner(config: RunConfig) -> RunnerHandle:
    """Start ``python -m soak.run.runner`` with the config on stdin; wait for its handshake.

    The runner's stderr stays on ours until the handshake, so early errors (a bad prompt
    file) reach the operator; after it, the runner writes only to ``runner.log``.
    """
    cmd = [sys.executable, "-m", "soak.run.runner"]
    if _tied_to:
        cmd += ["--lifeline-fd", str(_tied_to[-1])]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        pass_fds=tuple(_tied_to[-1:]),
    )
    if _tied_to:
        _tied_runners.append(proc)
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
            return proc.status() != psutil.STATUS_ZOMBIE and "soak.run.runner" in " ".join(
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


LIFELINE_GONE = "the soaktop demo that started this run ended (its simulated engine with it)"
"""The runner's stop reason when its lifeline pipe reaches end-of-file."""


def lifeline_arg(argv: list[str]) -> int | None:
    """The runner's ``--lifeline-fd FD`` (None without it)."""
    if len(argv) >= 2 and argv[0] == "--lifeline-fd":
        return int(argv[1])
    return None


def watch_lifeline(fd: int, on_gone: Callable[[], None]) -> None:
    """In the runner, on the running loop: call ``on_gone`` once when the lifeline pipe
    ``fd`` reaches end-of-file (the process that started the runner ended, however it
    ended; nothing is ever written to the pipe)."""
    import asyncio

    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            if os.read(fd, 4096):
                return  # nothing is ever written; if something is, it is not the end
        except BlockingIOError:
            return
        except OSError:
            pass  # a broken pipe is as gone as a closed one
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(fd)
        on_gone()

    loop.add_reader(fd, readable)
