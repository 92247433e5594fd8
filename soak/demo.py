"""``soaktop demo``: start the simulated engine, soak it, stop it.

The simulated engine is a real HTTP server in its own process (``python -m simengine``);
the soak against it is exactly the soak a user runs against a real vLLM.
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

SCENARIOS = {
    "healthy": "no faults",
    "engine-death": "replica 1 dies half-way through the load",
    "post-load-500": "one HTTP 500 on one after-load JSON probe",
    "broken-contracts": "json tasks 3 and 11 get a control character / invalid JSON, tools "
    "task 2 bad arguments, in every gate phase",
    "xid-mid-run": "Xid 31 on GPU 1 and an illegal-memory-access log line at half the load",
}
"""The simulated engine's named fault scenarios, as ``soaktop demo --scenario`` lists them."""


class SimStartError(RuntimeError):
    """The simulated engine did not come up (the message holds its stderr)."""


@dataclass
class SimHandle:
    """A running simulated engine."""

    proc: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log_dir: Path

    @property
    def urls(self) -> list[str]:
        """Base URL of each replica."""
        return [r["url"] for r in self.ready["replicas"]]

    @property
    def model(self) -> str:
        """The served model name."""
        return str(self.ready["replicas"][0]["model"])


@contextlib.contextmanager
def simulated_engine(
    *,
    replicas: int = 2,
    gpus_per_replica: int = 4,
    scenario: str = "healthy",
    scenario_at_s: float | None = None,
    extra_args: list[str] | None = None,
    start_timeout_s: float = 30.0,
) -> Iterator[SimHandle]:
    """Run ``python -m simengine`` on free loopback ports for the ``with`` block."""
    log_dir = Path(tempfile.mkdtemp(prefix="soaktop-sim-"))
    ready_file = log_dir / "ready.json"
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
    ]
    if scenario_at_s is not None:
        cmd += ["--scenario-at", f"{scenario_at_s:g}"]
    cmd += extra_args or []
    err = (log_dir / "sim.stderr").open("wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while not ready_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SimStartError(
                    "the simulated engine did not start:\n"
                    + (log_dir / "sim.stderr").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.05)
        yield SimHandle(proc, orjson.loads(ready_file.read_bytes()), log_dir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err.close()


def keep_server_logs(sim: SimHandle, run_dir: Path) -> None:
    """Copy the replicas' logs into the run directory (evidence beside the record)."""
    dest = run_dir / "server_logs"
    dest.mkdir(exist_ok=True)
    for r in sim.ready["replicas"]:
        src = Path(r["log"])
        if src.exists():
            shutil.copy2(src, dest / src.name)


def cleanup(sim: SimHandle) -> None:
    """Remove the simulated engine's temporary directory."""
    if not os.environ.get("SOAKTOP_KEEP_SIM_DIR"):
        shutil.rmtree(sim.log_dir, ignore_errors=True)
