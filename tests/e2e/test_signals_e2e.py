"""Signals and crashes mid-load still leave a record and intact journals."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

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


def _every_line_is_json(path: Path) -> int:
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


def _pid_from_log(run_dir: Path) -> int:
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "soak.run.runner" in cmd and proc.cwd() == os.getcwd():
            open_files = {f.path for f in proc.open_files()}
            if str(run_dir / "requests.jsonl") in open_files:
                pid: int = proc.info["pid"]
                return pid
    raise AssertionError("runner process not found")


def test_kill_9_then_recover_then_verify(sim, tmp_path):
    out = tmp_path / "runs"
    p = soaktop(
        *run_args(sim, out, "--concurrency", "16", "--duration", "60", "--max-tokens", "32")
    )
    run_dir = wait_for_phase(out, "load")
    import time

    time.sleep(2)  # let some requests finish
    killed_at = datetime.now(UTC)
    os.kill(_pid_from_log(run_dir), signal.SIGKILL)
    text, _ = p.communicate(timeout=30)
    time.sleep(1.5)  # recovered later than it died: the record must say when it died
    assert p.returncode == 4 and "soaktop recover" in text, text
    assert not (run_dir / "record.json").exists()
    before = journal(run_dir)
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc == 0, text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED" and rec["recovered"] is True
    assert "runner killed" in rec["reasons"][0]["message"]
    assert rec["load"]["completed"] == sum(1 for r in before if r["ok"]) > 0
    # it ended when the journals stop (the last snapshot, one a tick), not when recovered
    ended = datetime.fromisoformat(rec["ended_at"])
    assert killed_at - timedelta(seconds=2) < ended <= killed_at, (rec["ended_at"], killed_at)
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

    from soak.run.control import send_control

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


def test_pause_stops_issuing_then_resume_goes_on_and_the_record_says_so(sim, tmp_path):
    """p in the monitor: no request is sent while paused; the pause is a phase and a note."""
    import time

    from soak.run.control import send_control

    out = tmp_path / "runs"
    args = run_args(sim, out, "--concurrency", "4", "--duration", "6", "--max-tokens", "8")
    p = soaktop(*args)
    run_dir = wait_for_phase(out, "load")
    time.sleep(1.0)
    send_control(run_dir, "pause", "checking the replica")
    wait_for_phase(out, "paused")
    time.sleep(2.0)
    send_control(run_dir, "resume")
    text, _ = p.communicate(timeout=60)
    assert p.returncode == 0, text
    rec = record(run_dir)
    names = [ph["name"] for ph in rec["phases"]]
    assert names[names.index("load") :][:3] == ["load", "paused", "load"], names
    paused = next(ph for ph in rec["phases"] if ph["name"] == "paused")
    # the workers finish what is in flight, then send nothing until the resume
    sent = [r["sent_s"] for r in journal(run_dir)]
    inside = [s for s in sent if paused["start_s"] + 0.5 < s < paused["end_s"]]
    assert not inside, (paused, inside)
    assert any(s > paused["end_s"] for s in sent)  # issuing went on after the resume
    (note,) = [r for r in rec["reasons"] if r["code"] == "paused"]
    assert note["effect"] == "note" and "paused issuing 1×" in note["message"]
    controls = [e["message"] for e in journal(run_dir, "events.jsonl") if e["kind"] == "control"]
    assert controls == [
        "operator paused issuing (checking the replica)",
        "operator resumed issuing",
    ]
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_attach_without_a_terminal_follows_and_detaching_leaves_the_run_going(sim, tmp_path):
    """soaktop attach from another shell: status lines, the final report and its exit code;
    a Ctrl-C in the attached shell detaches and never stops the run."""
    import signal
    import time

    out = tmp_path / "runs"
    args = run_args(sim, out, "--concurrency", "2", "--duration", "5", "--max-tokens", "8")
    owner = soaktop(*args)
    run_dir = wait_for_phase(out, "load")
    first = soaktop("attach", str(run_dir))
    time.sleep(1.5)
    first.send_signal(signal.SIGINT)
    text1, _ = first.communicate(timeout=20)
    assert first.returncode == 129 and f"re-attach with: soaktop attach {run_dir}" in text1
    second = soaktop("attach", str(run_dir))
    text2, _ = second.communicate(timeout=60)
    owner.communicate(timeout=60)
    assert owner.returncode == 0
    assert second.returncode == 0 and "PASSED" in text2 and "[load" in text2, text2
    # attach to a finished run prints its report; view does the same without a terminal
    rc, text3 = run_soaktop("attach", str(run_dir))
    assert rc == 0 and "PASSED" in text3
    rc, text4 = run_soaktop("view", str(run_dir))
    assert rc == 0 and "record:" in text4
    rc, text5 = run_soaktop("view", str(tmp_path))
    assert rc == 2 and "not a soaktop run directory" in text5
