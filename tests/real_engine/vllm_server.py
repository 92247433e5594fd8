"""A real vLLM 0.32 OpenAI server on the CPU, serving the project's tiny model, for tests.

    with vllm_server(log_dir, ["--max-num-seqs", "4"]) as srv:
        ...  # srv.url, srv.model ("tiny"), srv.log_path, srv.pid

The venv comes from ``scripts/vllm_cpu_env.sh`` and the model from
``scripts/build_tiny_model.py`` (both cached under ``$SOAKTOP_CACHE``, built on first use).
The server runs in its own session; on exit its whole process group is stopped (SIGTERM,
then SIGKILL after 30 s) and any straggler (``VLLM::EngineCore``, ``VLLM::Worker``) is
found by its session id (or a tag in its environment) and killed. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny"
STARTUP_TIMEOUT_S = 180.0
STOP_GRACE_S = 30.0
SERVER_NICE = 10
"""The server's CPU priority. On a 2-core box shared with the client, vLLM's CPU engine
starves everything else: soaktop's event loop (and an idle probe beside it) waited 0.2-1.8 s
on the run queue, and every soak ended INVALID with ``client_overloaded``. Niced, the
client keeps its share and vLLM's throughput is unchanged (it still gets the idle cycles)."""
TAG_ENV = "SOAKTOP_VLLM_TAG"
"""Set in the server's environment (inherited by its children) to find stragglers."""

BASE_ARGS = [
    "--served-model-name",
    MODEL_NAME,
    "--host",
    "127.0.0.1",
    "--max-model-len",
    "2048",
    "--dtype",
    "float32",
    "--enforce-eager",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
]
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_SERVER_DEV_MODE": "1",  # GET /server_info: the recipe soaktop records
}


class VllmStartError(RuntimeError):
    """The server exited or never became healthy (the message holds its log tail)."""


def _last_line(cmd: Sequence[str], what: str, timeout: float) -> str:
    p = subprocess.run(
        list(cmd),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise VllmStartError(f"{what} failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    return lines[-1].strip()


@functools.cache
def ensure_venv() -> Path:
    """The cached vLLM CPU venv (built by ``scripts/vllm_cpu_env.sh`` if absent)."""
    venv = Path(_last_line(["bash", str(REPO / "scripts/vllm_cpu_env.sh")], "vllm_cpu_env.sh", 900))
    if not (venv / "bin/python").exists():
        raise VllmStartError(f"vllm_cpu_env.sh printed {venv}, which holds no bin/python")
    return venv


@functools.cache
def ensure_model() -> Path:
    """The cached tiny model (built by ``scripts/build_tiny_model.py`` if absent)."""
    py = ensure_venv() / "bin/python"
    cmd = [str(py), str(REPO / "scripts/build_tiny_model.py")]
    return Path(_last_line(cmd, "build_tiny_model.py", 300))


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, n: int = 60) -> str:
    """The last ``n`` lines of a file (empty if it is absent)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


@dataclass
class VllmServer:
    """A running server; ``url`` is the base URL (no ``/v1``)."""

    url: str
    model: str
    log_path: Path
    pid: int
    proc: subprocess.Popen[bytes] = field(repr=False)
    tag: str = field(repr=False)

    def alive(self) -> bool:
        """The API server process has not exited."""
        return self.proc.poll() is None

    def log_text(self) -> str:
        """The server log so far."""
        return self.log_path.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """The server's live processes (API server, ``VLLM::EngineCore``, ``VLLM::Worker``)."""
        return server_processes(self.pid, self.tag)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait for the API server to exit on its own; its exit code, or None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def server_processes(sid: int, tag: str) -> list[psutil.Process]:
    """Live processes of one server: its session (``start_new_session``: the session id is
    the API server's pid, inherited by ``VLLM::EngineCore`` and ``VLLM::Worker`` even once
    orphaned) or, for one that left the session, the tag in its environment. (The tag alone
    is not enough: setproctitle overwrites the environment that /proc shows.) Zombies, which
    hold nothing and only wait to be reaped, do not count."""
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if os.getsid(p.pid) == sid or p.environ().get(TAG_ENV) == tag:
                found.append(p)
    return found


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop(proc: subprocess.Popen[bytes], tag: str, grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop the server's process group; kill stragglers. Returns what had to be SIGKILLed."""
    pgid = proc.pid  # start_new_session: the server leads its own group
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    family += [p for p in server_processes(pgid, tag) if p not in family]
    _signal_group(pgid, signal.SIGTERM)
    for p in family:  # a child that left the group still gets the SIGTERM
        with contextlib.suppress(psutil.Error):
            p.terminate()
    killed: list[str] = []
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        killed.append(f"api_server pid {proc.pid}")
        _signal_group(pgid, signal.SIGKILL)
        proc.wait(10)
    _, alive = psutil.wait_procs(family, timeout=max(1.0, grace_s / 3))
    for p in alive + [p for p in server_processes(pgid, tag) if p not in alive]:
        with contextlib.suppress(psutil.Error):
            killed.append(f"{p.name()} pid {p.pid}")
            p.kill()
    _signal_group(pgid, signal.SIGKILL)  # anything left in the group
    psutil.wait_procs(alive, timeout=10)
    survivors = server_processes(pgid, tag)
    if survivors:
        raise RuntimeError(f"vLLM processes survived SIGKILL: {survivors}")
    return killed


def _lower_priority(pid: int, nice: int) -> None:
    """Nice the new server (its children inherit it). With autogroup scheduling (Linux's
    default on desktops and this VM) the nice value of a session's group is what counts
    between sessions: it lives in /proc/PID/autogroup."""
    if nice <= 0:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as fh:
        fh.write(str(nice))


def _spawn(
    venv: Path, model: Path, log_path: Path, extra_args: Sequence[str], nice: int
) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start the API server on a free port: (process, url, tag)."""
    port = free_port()
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= SERVER_ENV | {"PYTHONUNBUFFERED": "1", TAG_ENV: tag}
    cmd = [
        str(venv / "bin/python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--port",
        str(port),
        *BASE_ARGS,
        *extra_args,
    ]
    with log_path.open("ab") as log:
        log.write(f"# soaktop test (nice {nice}): {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log_path.parent,
            start_new_session=True,
        )
    _lower_priority(proc.pid, nice)
    return proc, f"http://127.0.0.1:{port}", tag


def _wait_healthy(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float
) -> float:
    """Poll /health until 200; seconds it took. Raises if the server exits or times out."""
    t0 = time.monotonic()
    while not _health(url):
        if proc.poll() is not None:
            raise VllmStartError(
                f"vLLM exited with {proc.returncode} before /health answered; "
                f"log {log_path}:\n{tail(log_path)}"
            )
        if time.monotonic() - t0 > timeout_s:
            raise VllmStartError(
                f"vLLM /health not 200 within {timeout_s:g} s; log {log_path}:\n{tail(log_path)}"
            )
        time.sleep(0.5)
    return time.monotonic() - t0


@contextlib.contextmanager
def vllm_server(
    log_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    log_name: str = "vllm-server.log",
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    nice: int = SERVER_NICE,
) -> Iterator[VllmServer]:
    """Start a vLLM server, wait until /health answers 200, yield it, stop it.

    Its output goes to ``log_dir/log_name``. One retry if the free port was taken between
    probing it and vLLM binding it.
    """
    venv, model = ensure_venv(), ensure_model()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / log_name
    for attempt in (1, 2):
        proc, url, tag = _spawn(venv, model, log_path, extra_args, nice)
        try:
            took = _wait_healthy(proc, url, log_path, startup_timeout_s)
            break
        except VllmStartError as e:
            stop(proc, tag)
            if attempt == 2 or "address already in use" not in str(e).lower():
                raise
    server = VllmServer(
        url=url, model=MODEL_NAME, log_path=log_path, pid=proc.pid, proc=proc, tag=tag
    )
    try:
        with log_path.open("a") as fh:
            fh.write(f"# soaktop test: healthy after {took:.1f} s\n")
        yield server
    finally:
        killed = stop(proc, tag)
        if killed:
            with log_path.open("a") as fh:
                fh.write(f"# soaktop test: SIGKILLed {', '.join(killed)}\n")
