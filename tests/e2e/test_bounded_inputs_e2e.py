"""Every input bounded, every error a sentence (issue 12 §6), from the outside: the real
CLI exits 2 with the field, the value and what is allowed, never a traceback or a
pydantic dump, and no run directory exists afterwards. None of these reach a server: the
endpoint is a closed loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLOSED = "http://127.0.0.1:9"


def _soaktop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SOAKTOP_")}
    return subprocess.run(
        [sys.executable, "-m", "soak", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=base | (env or {}),
    )


def _run(out: Path, *extra: str) -> list[str]:
    head = ["run", "--endpoint", CLOSED, "--model", "m", "--out", str(out), "--headless"]
    return [*head, "--no-nvml", "--no-gates", "--duration", "1", *extra]


def _refused(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    for w in words:
        assert w in p.stderr, p.stderr
    for leak in ("Traceback", "validation error for", "pydantic.dev", "input_value="):
        assert leak not in p.stderr + p.stdout, p.stderr


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--concurrency", str(2**64 + 1)], ["concurrency = 18446744073709551617 (--concurrency)"]),
        (["--max-requests", str(10**25)], ["max_requests", "1,000,000,000"]),
        (["--drain-timeout", "inf"], ["drain_timeout_s = inf (--drain-timeout)", "finite"]),
        (["--duration", "nan"], ["duration_s = nan", "finite"]),
        (["--endpoint", "http://127.0.0.1:99999"], ["port '99999'", "1 to 65535"]),
        (["--api-key-env", "SOAK_E2E_NO_SUCH_KEY"], ["SOAK_E2E_NO_SUCH_KEY is not set"]),
        (["--concurrency", "lots"], ["--concurrency", "'lots' is not a whole number"]),
        (["--dcgm", "http://127.0.0.1:0/metrics"], ["dcgm", "1 to 65535"]),
        (["--ignore-xid", "0"], ["ignore_xid[0] = 0", "from 1 to 1,000"]),
        (["--refresh", "inf"], ["--refresh", "from 0.1 to 60"]),
    ],
)
def test_a_bad_option_is_a_sentence_and_leaves_no_run_directory(tmp_path, extra, words):
    out = tmp_path / "runs"
    _refused(_soaktop(*_run(out, *extra)), *words)
    assert not out.exists() or not any(out.iterdir())


def test_environment_and_toml_values_are_bounded_the_same(tmp_path):
    out = tmp_path / "runs"
    p = _soaktop(*_run(out), env={"SOAKTOP_TELEMETRY_INTERVAL_S": "inf"})
    _refused(p, "telemetry_interval_s = 'inf' (SOAKTOP_TELEMETRY_INTERVAL_S)", "at most 60")
    toml = tmp_path / "c.toml"
    toml.write_text("[run]\nmax_tokens = 99999999999999999999999\n")
    p = _soaktop(*_run(out, "--config", str(toml)))
    _refused(p, f"max_tokens = 99999999999999999999999 (config file {toml})", "10,000,000")
    toml.write_bytes(b"\xff\xfe[run]\n")
    _refused(_soaktop(*_run(out, "--config", str(toml))), "is not valid TOML")
    assert not out.exists() or not any(out.iterdir())


def test_the_demo_checks_its_options_before_starting_anything(tmp_path):
    out = tmp_path / "runs"
    p = _soaktop("demo", "--out", str(out), "--headless", "--duration", "inf")
    _refused(p, "duration_s = inf (--duration)")
    _refused(_soaktop("demo", "--replicas", "0"), "--replicas", "from 1 to 64")
    assert "simulated engine up" not in p.stdout
    assert not out.exists()


def test_the_runner_given_a_bad_config_says_it_in_a_sentence():
    p = subprocess.run(
        [sys.executable, "-m", "soak.run.runner"],
        input='{"endpoints": ["http://127.0.0.1:9"], "model": "m", "drain_timeout_s": null}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    _refused(p, "drain_timeout_s = None", "cannot be used")
