"""A real llama.cpp ``llama-server`` on the CPU, serving the tiny model as GGUF, for tests.

    with llama_server(log_dir, ["-np", "2"]) as srv:
        ...  # srv.url, srv.model ("tiny"), srv.log_path, srv.pid

The binary comes from ``scripts/llama_server_env.sh`` and the model from
``scripts/build_tiny_gguf.py`` (run by the vLLM CPU venv's Python); both are cached under
``$SOAKTOP_CACHE``. ``binary()`` and ``gguf()`` only *look* for them (no build inside a
test: a cold build takes minutes); ``missing()`` says exactly what is absent and how to
build it, and the tier's conftest skips with that reason (a failure when ``CI=true``).
One process, its own session; stopped with SIGTERM, then SIGKILL. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.real_engine.vllm_server import TAG_ENV, free_port, stop, tail
from tests.real_engine.vllm_server import _lower_priority as lower_priority

VERSION = "0.3.36"
"""llama-cpp-python's sdist version whose vendored llama.cpp is built (llama_server_env.sh)."""
MODEL_NAME = "tiny"
STARTUP_TIMEOUT_S = 60.0
SERVER_NICE = 10
"""As for vLLM (vllm_server.SERVER_NICE): on 2 cores the client keeps its share."""

BASE_ARGS = ["--host", "127.0.0.1", "--alias", MODEL_NAME, "--metrics", "--slots", "--no-webui"]
"""Every server: loopback, the model named ``tiny``, /metrics and /slots on."""


class LlamaStartError(RuntimeError):
    """The server exited or never became healthy (the message holds its log tail)."""


def cache_dir() -> Path:
    """``$SOAKTOP_CACHE`` (default ``~/.cache/soaktop``), as the build scripts use it."""
    return Path(os.environ.get("SOAKTOP_CACHE") or Path.home() / ".cache" / "soaktop")


def binary() -> Path:
    """Where ``scripts/llama_server_env.sh`` leaves ``llama-server``."""
    return cache_dir() / f"llama-server-{VERSION}" / "bin" / "llama-server"


def gguf() -> Path:
    """Where ``scripts/build_tiny_gguf.py`` leaves the tiny model."""
    return cache_dir() / "tiny-gguf-v1" / "tiny.gguf"


def missing() -> str | None:
    """Why the tier cannot run here (what is absent and the command that builds it)."""
    stamp = binary().parent.parent / ".soaktop-complete"
    if not (binary().is_file() and stamp.is_file()):
        return f"llama-server not built at {binary()} (run: make real-engine-env)"
    if not (gguf().is_file() and (gguf().parent / ".soaktop-complete").is_file()):
        return f"tiny GGUF not built at {gguf()} (run: make real-engine-env)"
    return None


@dataclass
class LlamaServer:
    """A running server; ``url`` is the base URL (no ``/v1``)."""

    url: str
    model: str
    log_path: Path
    pid: int
    proc: subprocess.Popen[bytes] = field(repr=False)
    tag: str = field(repr=False)

    def alive(self) -> bool:
        """The server process has not exited."""
        return self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        """Wait for the server to exit; its exit code (``-signal`` if killed), or None."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_text(self) -> str:
        """The server log so far."""
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        """GET ``path``: (status, body); an HTTP error status is returned, not raised."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def get_json(self, path: str) -> Any:
        """GET ``path`` and parse it (200 expected)."""
        status, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _spawn(
    log_path: Path, extra_args: Sequence[str], nice: int
) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    tag = uuid.uuid4().hex
    cmd = [str(binary()), "-m", str(gguf()), "--port", str(port), *BASE_ARGS, *extra_args]
    with log_path.open("ab") as log:
        log.write(f"# soaktop test (nice {nice}): {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=os.environ | {TAG_ENV: tag},
            cwd=log_path.parent,
            start_new_session=True,
        )
    lower_priority(proc.pid, nice)
    return proc, f"http://127.0.0.1:{port}", tag


def _wait_healthy(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float
) -> float:
    t0 = time.monotonic()
    while not _health(url):
        if proc.poll() is not None:
            raise LlamaStartError(
                f"llama-server exited with {proc.returncode} before /health answered; "
                f"log {log_path}:\n{tail(log_path)}"
            )
        if time.monotonic() - t0 > timeout_s:
            raise LlamaStartError(
                f"llama-server /health not 200 within {timeout_s:g} s; log {log_path}:\n"
                f"{tail(log_path)}"
            )
        time.sleep(0.2)
    return time.monotonic() - t0


@contextlib.contextmanager
def llama_server(
    log_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    log_name: str = "llama-server.log",
    nice: int = SERVER_NICE,
) -> Iterator[LlamaServer]:
    """Start ``llama-server``, wait until /health answers 200, yield it, stop it.

    One retry if the free port was taken between probing it and the server binding it.
    """
    why = missing()
    if why is not None:
        raise LlamaStartError(why)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / log_name
    for attempt in (1, 2):
        proc, url, tag = _spawn(log_path, extra_args, nice)
        try:
            took = _wait_healthy(proc, url, log_path, STARTUP_TIMEOUT_S)
            break
        except LlamaStartError as e:
            stop(proc, tag, grace_s=10)
            if attempt == 2 or "bind" not in str(e).lower():
                raise
    server = LlamaServer(
        url=url, model=MODEL_NAME, log_path=log_path, pid=proc.pid, proc=proc, tag=tag
    )
    try:
        with log_path.open("a") as fh:
            fh.write(f"# soaktop test: healthy after {took:.1f} s\n")
        yield server
    finally:
        stop(proc, tag, grace_s=10)
