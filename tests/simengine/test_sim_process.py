"""``python -m simengine`` as a subprocess: ready file, stdout line, ports, SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    ready = tmp_path / "run" / "ready.json"
    cmd = [sys.executable, "-m", "simengine", "--log-dir", str(tmp_path / "logs"),
           "--ready-file", str(ready), "--decode-ms-base", "2", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 15
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            pytest.fail(f"simengine did not get ready: rc={proc.returncode} {err.decode()}")
        time.sleep(0.02)
    return proc, ready


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        raise


def test_ready_file_stdout_and_sigterm(tmp_path: Path) -> None:
    proc, ready = _start(tmp_path, "--replicas", "2", "--scenario", "healthy")
    try:
        info = json.loads(ready.read_text())
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line) == info
        assert info["pid"] == proc.pid and info["scenario"] == "healthy"
        assert [r["index"] for r in info["replicas"]] == [0, 1]
        with httpx.Client(timeout=10) as client:
            for r in info["replicas"]:
                assert r["url"].startswith("http://127.0.0.1:")
                assert r["model"] == "tiny-sim"
                assert Path(r["log"]).is_absolute() and Path(r["log"]).exists()
                assert client.get(r["url"] + "/health").status_code == 200
                dcgm = client.get(r["dcgm_url"])
                assert dcgm.status_code == 200 and "DCGM_FI_DEV_GPU_UTIL" in dcgm.text
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
                resp = client.post(r["url"] + "/v1/chat/completions", json=body)
                assert resp.json()["usage"]["completion_tokens"] >= 1
    finally:
        rc = _stop(proc)
    assert rc == 0
    port = int(info["replicas"][0]["url"].rsplit(":", 1)[1])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_fixed_port_layout(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    for p in (base, base + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                pytest.skip(f"port {p} is taken on this machine")
    if base + 100 > 65535:
        pytest.skip("no room above the free port")
    proc, ready = _start(tmp_path, "--replicas", "1", "--port", str(base))
    try:
        rep = json.loads(ready.read_text())["replicas"][0]
        assert rep["url"] == f"http://127.0.0.1:{base}"
        assert rep["dcgm_url"] == f"http://127.0.0.1:{base + 100}/metrics"
    finally:
        assert _stop(proc) == 0


def test_refuses_non_loopback_host(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "simengine", "--host", "0.0.0.0", "--log-dir", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"loopback" in done.stderr


def test_bad_fault_json_is_a_usage_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "simengine", "--fault", '{"action": "explode"}']
    done = subprocess.run(cmd, capture_output=True, timeout=30)
    assert done.returncode == 2 and b"action" in done.stderr
