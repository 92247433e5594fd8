"""Signals and crashes mid-load still leave a record and intact journals."""

from __future__ import annotations

import os
import signal

import orjson
import pytest

from tests.e2e.conftest import (
    journal,
    only_run_dir,
    record,
    run_args,
    run_soaktop,
    soaktop,
    wait_for_phase,
)

pytestmark = pytest.mark.e2e


def _every_line_is_json(path) -> int:
    lines = path.read_bytes().splitlines()
    for line in lines:
        orjson.loads(line)
    return len(lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_the_cli_mid_load_ends_aborted_with_a_record(sim, tmp_path, sig):
    out = tmp_path / "runs"
    p = soaktop(
        *run_args(sim, out, "--concurrency", "16", "--duration", "60", "--max-tokens", "32")
    )
    run_dir = wait_for_phase(out, "load")
    p.send_signal(sig)
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 4, text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED"
    assert rec["reasons"][0]["message"].startswith(f"{sig.name} during load")
    assert rec["load"]["issue_s"] < 30  # stopped early, not at the 60 s window
    n = _every_line_is_json(run_dir / "requests.jsonl")
    assert n == rec["load"]["completed"] + rec["load"]["failed"] + rec["load"]["cancelled"]
    _every_line_is_json(run_dir / "events.jsonl")
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text


def test_sigterm_straight_to_the_runner(sim, tmp_path):
    out = tmp_path / "runs"
    p = soaktop(*run_args(sim, out, "--concurrency", "8", "--duration", "60"))
    run_dir = wait_for_phase(out, "load")
    pid = _pid_from_log(run_dir)
    os.kill(pid, signal.SIGTERM)
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 4, text
    assert record(run_dir)["status"] == "ABORTED"


def _pid_from_log(run_dir) -> int:
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "soak.runner" in cmd and proc.cwd() == os.getcwd():
            open_files = {f.path for f in proc.open_files()}
            if str(run_dir / "requests.jsonl") in open_files:
                return proc.info["pid"]
    raise AssertionError("runner process not found")


def test_kill_9_then_recover_then_verify(sim, tmp_path):
    out = tmp_path / "runs"
    p = soaktop(
        *run_args(sim, out, "--concurrency", "16", "--duration", "60", "--max-tokens", "32")
    )
    run_dir = wait_for_phase(out, "load")
    import time

    time.sleep(2)  # let some requests finish
    os.kill(_pid_from_log(run_dir), signal.SIGKILL)
    text, _ = p.communicate(timeout=30)
    assert p.returncode == 4 and "soaktop recover" in text, text
    assert not (run_dir / "record.json").exists()
    before = journal(run_dir)
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc == 0, text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED" and rec["recovered"] is True
    assert "runner killed" in rec["reasons"][0]["message"]
    assert rec["load"]["completed"] == sum(1 for r in before if r["ok"]) > 0
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text


def test_tampered_journal_fails_verify(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *run_args(sim, out, "--concurrency", "4", "--max-requests", "12", "--max-tokens", "8")
    )
    assert rc == 0, text
    run_dir = only_run_dir(out)
    lines = (run_dir / "requests.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "requests.jsonl").write_bytes(b"".join(lines[:-1]))  # drop one request
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 1
    assert "requests.jsonl: sha256" in text and "load.completed: record 12, journal 11" in text


def test_hangup_detaches_and_the_runner_finishes_the_soak(sim, tmp_path):
    """A dropped SSH link (SIGHUP to the CLI) must not end the soak (DESIGN §4)."""
    import time

    out = tmp_path / "runs"
    p = soaktop(*run_args(sim, out, "--concurrency", "4", "--duration", "4", "--max-tokens", "8"))
    run_dir = wait_for_phase(out, "load")
    p.send_signal(signal.SIGHUP)
    text, _ = p.communicate(timeout=30)
    assert p.returncode == 129, text
    assert "the run goes on" in text
    deadline = time.monotonic() + 60
    while not (run_dir / "record.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    rec = record(run_dir)
    assert rec["status"] == "PASSED" and 4.0 <= rec["load"]["issue_s"] < 5.0


def test_recover_refuses_a_run_whose_runner_is_alive(sim, tmp_path):
    out = tmp_path / "runs"
    p = soaktop(*run_args(sim, out, "--concurrency", "4", "--duration", "60", "--max-tokens", "8"))
    run_dir = wait_for_phase(out, "load")
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc == 2 and "still alive" in text, text
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    assert record(run_dir)["recovered"] is False


def test_control_file_marks_and_stops_the_run(sim, tmp_path):
    """The channel the TUI and other shells use: a mark lands in the events, stop drains."""
    import time

    from soak.control import send_control

    out = tmp_path / "runs"
    p = soaktop(*run_args(sim, out, "--concurrency", "4", "--duration", "60", "--max-tokens", "8"))
    run_dir = wait_for_phase(out, "load")
    send_control(run_dir, "mark", "restarted replica 1 by hand")
    time.sleep(1.5)
    send_control(run_dir, "stop")
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 4, text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED" and "operator stop" in rec["reasons"][0]["message"]
    marks = [e for e in journal(run_dir, "events.jsonl") if e["kind"] == "mark"]
    assert [m["message"] for m in marks] == ["restarted replica 1 by hand"]
