"""The request surface as a user meets it (issue 18 §4): real CLI runs against the
simulated engine serving TLS on 127.0.0.1 with certificates made at test time, asking a
client certificate (mutual TLS) and two headers of every request, one of them a secret
taken from the environment; the load on the Responses API.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from soak.cli.demo import SimHandle, simulated_engine
from tests.e2e.conftest import journal, only_run_dir, record
from tests.tls_certs import Certs, make_certs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SECRET = "hdr-secret-5e4d3c2b1a09"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_sim(certs: Certs) -> Iterator[SimHandle]:
    with simulated_engine(
        replicas=1,
        gpus_per_replica=1,
        extra_args=[
            "--decode-ms-base", "3", "--reasoning-tokens", "3",
            "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
            "--tls-client-ca", str(certs.ca),
            "--require-header", "X-Tenant: blue", "--require-header", f"X-Key: {SECRET}",
        ],
    ) as handle:  # fmt: skip
        yield handle


def _run(sim: SimHandle, out: Path, *extra: str) -> tuple[int, str]:
    args = [sys.executable, "-m", "soak", "run", "--model", sim.model, "--out", str(out),
            "--headless", "--endpoint", sim.urls[0], "--max-requests", "16",
            "--concurrency", "4", *extra]  # fmt: skip
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SOAK_H7_KEY": SECRET}
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=180)
    return p.returncode, p.stdout + p.stderr


def _tls(certs: Certs, client: bool = True) -> list[str]:
    out = ["--ca-cert", str(certs.ca)]
    if client:
        out += ["--client-cert", str(certs.client_cert), "--client-key", str(certs.client_key)]
    return out


def _no_load(out: Path) -> bool:
    """The run stopped before its load: no load section, or nothing issued."""
    load = record(only_run_dir(out))["load"]
    return load is None or load["issued"] == 0


HEADERS = ["--header", "X-Tenant: blue", "--header", "X-Key: env:SOAK_H7_KEY"]


def test_mtls_headers_and_responses_api_pass(
    tls_sim: SimHandle, certs: Certs, tmp_path: Path
) -> None:
    assert tls_sim.urls[0].startswith("https://127.0.0.1:")
    rc, out = _run(tls_sim, tmp_path, *_tls(certs), *HEADERS, "--api", "responses",
                   "--gates", "json")  # fmt: skip
    assert rc == 0, out
    assert "PASSED" in out
    run_dir = only_run_dir(tmp_path)
    rec = record(run_dir)
    assert rec["load"]["completed"] == 16 and rec["load"]["failed"] == 0
    lines = [r for r in journal(run_dir) if r["phase"] == "load"]
    assert lines and all(r["ok"] and "/load/responses/" in r["id"] for r in lines)
    # Reasoning first (3 tokens): the first token before the first visible content.
    assert all(r["first_content_s"] > r["ttft_s"] for r in lines)
    assert all(r["output_tokens"] == r["chunks"] for r in lines)
    # The secret value reaches no file; the record names the headers.
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    cfg = (run_dir / "config.json").read_text()
    assert "X-Key: env:SOAK_H7_KEY" in cfg and "X-Tenant: <redacted>" in cfg


def test_without_the_ca_the_run_fails_before_load_naming_the_certificate(
    tls_sim: SimHandle, tmp_path: Path
) -> None:
    rc, out = _run(tls_sim, tmp_path, *HEADERS)
    assert rc != 0
    assert "CERTIFICATE_VERIFY_FAILED" in out and "--ca-cert" in out, out
    assert _no_load(tmp_path)


def test_without_a_client_certificate_mtls_refuses(
    tls_sim: SimHandle, certs: Certs, tmp_path: Path
) -> None:
    rc, out = _run(tls_sim, tmp_path, *_tls(certs, client=False), *HEADERS)
    assert rc != 0
    assert "--client-cert" in out, out
    assert _no_load(tmp_path)


def test_the_wrong_ca_is_named(tls_sim: SimHandle, certs: Certs, tmp_path: Path) -> None:
    rc, out = _run(tls_sim, tmp_path, "--ca-cert", str(certs.other_ca), *HEADERS)
    assert rc != 0 and "the --ca-cert given did not sign it" in out, out


def test_a_missing_header_is_what_the_server_refuses(
    tls_sim: SimHandle, certs: Certs, tmp_path: Path
) -> None:
    """The headers are what lets the load through: without X-Key every request is 401."""
    rc, out = _run(tls_sim, tmp_path, *_tls(certs), "--header", "X-Tenant: blue", "--no-gates")
    assert rc != 0, out
    assert "401" in out


def test_shards_get_tls_and_headers_but_never_the_secret_in_argv_or_environ(
    tls_sim: SimHandle, certs: Certs, tmp_path: Path
) -> None:
    """Two load shards: each reads the certificates itself (paths on its stdin), sends the
    headers, and neither its argv nor its environment holds the header's secret."""
    args = [sys.executable, "-m", "soak", "run", "--model", tls_sim.model, "--out",
            str(tmp_path), "--headless", "--endpoint", tls_sim.urls[0], "--no-gates",
            "--duration", "4", "--concurrency", "8", "--shards", "2", "--api", "responses",
            *_tls(certs), *HEADERS, "--header", "X-Team: team"]  # fmt: skip
    # A literal header value is no secret: a variable that merely contains it stays.
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SOAK_H7_KEY": SECRET,
                        "SOAK_R7_KEEP": "/srv/team/keep"}  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    seen: dict[int, tuple[bytes, bytes]] = {}
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            for p in psutil.process_iter(["pid", "cmdline"]):
                if "soak.run.shard_main" not in (p.info["cmdline"] or []) or p.pid in seen:
                    continue
                with contextlib.suppress(OSError, psutil.Error):
                    if proc.pid in {a.pid for a in p.parents()}:  # ours, not a neighbour's
                        seen[p.pid] = (
                            Path(f"/proc/{p.pid}/cmdline").read_bytes(),
                            Path(f"/proc/{p.pid}/environ").read_bytes(),
                        )
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()
    assert len(seen) == 2, seen.keys()
    for argv, environ in seen.values():
        assert SECRET.encode() not in argv and SECRET.encode() not in environ
        assert b"SOAK_H7_KEY=" not in environ
        assert b"SOAK_R7_KEEP=/srv/team/keep" in environ
    rec = record(only_run_dir(tmp_path))
    assert rec["load"]["failed"] == 0 and rec["load"]["completed"] > 0
