"""``soaktop demo``: start the simulated engine, soak it, stop it.

The simulated engine is a real HTTP server in its own process (``python -m simengine``);
the soak against it is exactly the soak a user runs against a real vLLM.

Everything the demo starts ends with it, however it ends (``kill -9`` included): the
engine and the runner each get the read end of a pipe whose write end only the demo
holds (:class:`Lifeline`); when the demo ends, the kernel closes it, the runner aborts and
writes its ABORTED record, and the engine stops moments later and removes its temporary
directory. Linux's ``PR_SET_PDEATHSIG`` is not used: it fires on the death of the parent
*thread*, and its signal would reach the engine through the same event loop as the pipe's
end-of-file, so it would add a caveat and no robustness.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from soak.run.config import RunConfig
from soak.run.spawn import runners_end_with_this_process, wait_for_tied_runners

SCENARIOS = {
    "healthy": "no faults, realistic noise: TTFT/ITL jitter, a memory sawtooth, no trend",
    "engine-death": "replica 1 dies half-way through the load",
    "post-load-500": "one HTTP 500 on one after-load JSON probe",
    "broken-contracts": "json tasks 3 and 11 get a control character / invalid JSON, tools "
    "task 2 bad arguments, in every gate phase",
    "xid-mid-run": "Xid 31 on GPU 1 and an illegal-memory-access log line at half the load",
    "slow-leak": "from 30 s into the load: KV usage and server memory (RSS, FB used) creep "
    "up and never come back, TTFT creeps up",
    "throughput-decay": "from 30 s into the load: decode slows step by step, output tok/s falls",
    "garbage-after": "from 40 s into the load: most plain answers degenerate (a looping "
    "phrase, runaway whitespace, tiny outputs) with HTTP 200",
}
"""The simulated engine's named scenarios, as ``soaktop demo --scenario`` lists them
(``simengine.faults.SCENARIO_NOTES`` and ``simengine.endurance`` hold the details)."""

SCENARIO_ONSET_S = {"slow-leak": 30.0, "throughput-decay": 30.0, "garbage-after": 40.0}
"""The slow scenarios' own onsets, seconds into the load (as ``simengine.faults`` has
them; this module does not import the engine, which runs in its own process)."""


def scenario_onset(scenario: str, duration_s: float, given_s: float | None) -> float:
    """When the demo's scenario strikes or begins: ``--scenario-at`` when given; a slow
    scenario at its own onset, or half-way when the load is too short to show it after
    that; the others (xid-mid-run, engine-death) half-way through the load."""
    if given_s is not None:
        return given_s
    half = duration_s / 2
    return min(SCENARIO_ONSET_S.get(scenario, half), half)


PARENT_GRACE_S = 3.0
"""How long the engine serves on after the demo ended (its runner aborts meanwhile)."""
RUNNER_WAIT_S = 30.0
"""At the end of the block, how long to wait for a runner that is still going to abort."""


class SimStartError(RuntimeError):
    """The simulated engine did not come up (the message holds its stderr)."""


@dataclass
class SimHandle:
    """A running simulated engine."""

    proc: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log_dir: Path

    @property
    def pid(self) -> int:
        """The process that serves (it reports its own pid in the ready file)."""
        return int(self.ready["pid"])

    @property
    def urls(self) -> list[str]:
        """Base URL of each replica."""
        return [r["url"] for r in self.ready["replicas"]]

    @property
    def model(self) -> str:
        """The served model name."""
        return str(self.ready["replicas"][0]["model"])


class Lifeline:
    """A pipe whose write end only this process holds (it is never inherited): a child
    given the read end sees end-of-file the moment this process ends, however it ends.
    Nothing is ever written to it."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe()  # both non-inheritable (PEP 446)

    def close(self) -> None:
        """Close both ends (children still holding the read end see end-of-file)."""
        for fd in (self._write_fd, self.read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def simulated_engine(
    *,
    replicas: int = 2,
    gpus_per_replica: int = 4,
    scenario: str = "healthy",
    scenario_at_s: float | None = None,
    noise: bool = False,
    seed: int | None = None,
    extra_args: list[str] | None = None,
    start_timeout_s: float = 30.0,
) -> Iterator[SimHandle]:
    """Run ``python -m simengine`` on free loopback ports for the ``with`` block.

    ``noise``: the engine's realistic jitter and memory sawtooth (the demo's; quiet by
    default so tests time it exactly); ``seed``: its answers and noise.

    The engine dies with this process (``--parent-fd``, see :class:`Lifeline`), and so
    does every runner this process starts inside the block
    (:func:`soak.run.spawn.runners_end_with_this_process`): a demo killed with ``kill -9``
    leaves nothing running. Its temporary directory (replica logs, ready file) is removed
    when the block ends — copy what you keep inside it (:func:`keep_server_logs`) — and
    by the engine itself if this process dies first. ``SOAKTOP_KEEP_SIM_DIR=1`` keeps it.
    """
    keep_dir = bool(os.environ.get("SOAKTOP_KEEP_SIM_DIR"))
    log_dir = Path(tempfile.mkdtemp(prefix="soaktop-sim-"))
    ready_file = log_dir / "ready.json"
    lifeline = Lifeline()
    cmd = [
        sys.executable,
        "-m",
        "simengine",
        "--replicas",
        str(replicas),
        "--gpus-per-replica",
        str(gpus_per_replica),
        "--scenario",
        scenario,
        "--log-dir",
        str(log_dir),
        "--ready-file",
        str(ready_file),
        *(["--noise"] if noise else []),
        *([] if seed is None else ["--seed", str(seed)]),
        *_lifetime_args(scenario_at_s, lifeline, keep_dir),
        *(extra_args or []),
    ]
    err = (log_dir / "sim.stderr").open("wb")
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # a Ctrl-C in the terminal is the CLI's to handle
            pass_fds=(lifeline.read_fd,),
        )
        _wait_ready(proc, ready_file, log_dir / "sim.stderr", start_timeout_s)
        with runners_end_with_this_process(lifeline.read_fd):
            yield SimHandle(proc, orjson.loads(ready_file.read_bytes()), log_dir)
    finally:
        # A runner still going (a monitor that left on a hang-up) aborts when the lifeline
        # closes; the engine serves until its record is written, then stops.
        lifeline.close()
        wait_for_tied_runners(RUNNER_WAIT_S)
        if proc is not None:
            _stop(proc)
        err.close()
        if not keep_dir:
            shutil.rmtree(log_dir, ignore_errors=True)


def _lifetime_args(scenario_at_s: float | None, lifeline: Lifeline, keep_dir: bool) -> list[str]:
    """The engine's arguments for when its fault fires and how it ends."""
    args = [] if scenario_at_s is None else ["--scenario-at", f"{scenario_at_s:g}"]
    # The runner, told by the same pipe, aborts in about a second; the engine serves that
    # long first, so the record blames the demo's end, not a vanished server.
    args += ["--parent-fd", str(lifeline.read_fd), "--parent-grace", f"{PARENT_GRACE_S:g}"]
    if not keep_dir:
        args.append("--remove-log-dir")
    return args


def _wait_ready(
    proc: subprocess.Popen[bytes], ready_file: Path, stderr_file: Path, timeout_s: float
) -> None:
    """Wait for the engine's ready file; an engine that exits or is late is killed and
    raises :class:`SimStartError` with the end of its stderr."""
    deadline = time.monotonic() + timeout_s
    while not ready_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SimStartError(
                "the simulated engine did not start:\n"
                + stderr_file.read_text(errors="replace")[-2000:]
            )
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the engine if it still runs; kill it after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def keep_server_logs(sim: SimHandle, run_dir: Path, config: RunConfig | None = None) -> None:
    """Copy the replicas' logs into the run directory (evidence beside the record).

    Only a demo that lives to the end of its run copies them: a demo killed with
    ``kill -9`` leaves a record without ``server_logs/`` (its engine took them along).
    The copy is scrubbed line by line by a redactor like the runner's (same salt, same
    pseudonyms) when the run has ``--redact`` or an API key."""
    from soak.run.redaction import log_redactor

    dest = run_dir / "server_logs"
    dest.mkdir(exist_ok=True)
    red = log_redactor(run_dir, config)
    for r in sim.ready["replicas"]:
        src = Path(r["log"])
        if not src.exists():
            continue
        if red is None:
            shutil.copy2(src, dest / src.name)
            continue
        with (
            src.open(encoding="utf-8", errors="replace") as fin,
            (dest / src.name).open("w", encoding="utf-8") as fout,
        ):
            for line in fin:
                fout.write(red.file_text(line))


def cleanup(sim: SimHandle) -> None:
    """Remove the simulated engine's temporary directory now (the end of the
    :func:`simulated_engine` block also does)."""
    if not os.environ.get("SOAKTOP_KEEP_SIM_DIR"):
        shutil.rmtree(sim.log_dir, ignore_errors=True)
