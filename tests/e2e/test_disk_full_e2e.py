"""A full disk loses nothing and says why (issue 12 §5).

The run directory is a small tmpfs (mounted here when the machine lets us — root, as in
CI — else those tests skip with the reason); the file-size-limit test needs no root and
always runs. Each run is bounded: a short duration, and the disk fills in seconds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.cli.demo import SimHandle
from tests.e2e.conftest import record, run_args, wait_for_phase

JOURNALS = ("events.jsonl", "requests.jsonl", "probes.jsonl", "snapshots.jsonl", "telemetry.jsonl")


@contextlib.contextmanager
def tmpfs(size_kib: int) -> Iterator[Path]:
    """A fresh tmpfs of ``size_kib`` KiB for the block (skips the test where none can be
    mounted)."""
    mnt = Path(tempfile.mkdtemp(prefix="soaktop-tmpfs-"))
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        mnt.rmdir()


def fill(path: Path) -> None:
    """Write zeros into ``path`` until the file system is full."""
    with path.open("wb", buffering=0) as fh:
        block = bytes(1 << 14)
        with contextlib.suppress(OSError):
            while True:
                fh.write(block)
        with contextlib.suppress(OSError):  # the last few bytes a block did not fit
            while True:
                fh.write(b"\0")


def run_cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "soak", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        **kw,
    )


def assert_whole_journals(run_dir: Path) -> None:
    """Every journal ends with a newline and every line is a JSON object."""
    for name in JOURNALS:
        path = run_dir / name
        if not path.exists() or path.stat().st_size == 0:
            continue
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{name} ends in a torn line"
        for line in data.splitlines():
            assert isinstance(orjson.loads(line), dict), name


def only_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_a_disk_that_fills_mid_load_stops_issuing_and_says_why(sim: SimHandle) -> None:
    with tmpfs(1000) as out:
        t0 = time.monotonic()
        r = run_cli(*run_args(sim, out, "--duration", "60", "--concurrency", "32", "--no-nvml"))
        took = time.monotonic() - t0
        assert r.returncode == 5, r.stdout[-2000:] + r.stderr[-2000:]
        assert "Traceback" not in r.stdout + r.stderr
        assert "disk full (ENOSPC" in r.stderr, r.stderr
        assert took < 50, f"issuing did not stop when the disk filled ({took:.0f} s)"
        run_dir = only_dir(out)
        rec = record(run_dir)
        assert rec["status"] == "ABORTED" and rec["exit_code"] == 5
        codes = [x["code"] for x in rec["reasons"]]
        assert codes[0] == "storage_error", codes
        assert "aborted" not in codes, "a full disk is not an operator's abort"
        assert "could not be written: disk full" in rec["reasons"][0]["message"]
        assert rec["load"]["completed"] > 0, "what was measured before the disk filled is kept"
        assert_whole_journals(run_dir)
        assert not (run_dir / ".reserve").exists()
        v = run_cli("verify", str(run_dir))
        assert v.returncode == 0, v.stdout + v.stderr


def test_a_full_disk_before_the_first_request_leaves_no_run_directory(sim: SimHandle) -> None:
    with tmpfs(600) as mnt:
        (mnt / "runs").mkdir()
        fill(mnt / "filler")
        (mnt / "filler").write_bytes(bytes(600 * 1024 - 200 * 1024))  # 200 KiB left
        r = run_cli(*run_args(sim, mnt / "runs", "--duration", "5", "--no-nvml"), timeout=60)
        assert r.returncode == 5, r.stdout + r.stderr
        assert "cannot start a run there: disk full" in r.stderr, r.stderr
        assert "Nothing was run" in r.stderr
        assert "Traceback" not in r.stdout + r.stderr
        assert list((mnt / "runs").iterdir()) == [], "no half run directory"


def test_recover_on_a_full_disk_says_so_then_succeeds_once_there_is_space(
    sim: SimHandle,
) -> None:
    with tmpfs(2048) as out:
        p = subprocess.Popen(
            [sys.executable, "-m", "soak", *run_args(sim, out, "--duration", "60", "--no-nvml")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            run_dir = wait_for_phase(out, "load", timeout=60)
            time.sleep(1.5)
            os.kill(int((run_dir / "runner.pid").read_text()), signal.SIGKILL)
        finally:
            p.wait(30)
        with (run_dir / "requests.jsonl").open("ab") as fh:  # a foreign writer's torn tail
            fh.write(b'{"id":"torn","ph')
        # An older runner held no reserve: without it the disk is truly full.
        (run_dir / ".reserve").unlink(missing_ok=True)
        fill(out / "filler")
        r = run_cli("recover", str(run_dir))
        assert r.returncode == 5, r.stdout + r.stderr
        assert "disk full (ENOSPC" in r.stderr and "run soaktop recover again" in r.stderr
        assert "Traceback" not in r.stdout + r.stderr
        assert not (run_dir / "record.json").exists()
        (out / "filler").unlink()
        r = run_cli("recover", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        rec = record(run_dir)
        assert rec["status"] == "ABORTED" and rec["recovered"]
        assert any(x["code"] == "journal_torn_tail" for x in rec["reasons"])
        assert_whole_journals(run_dir)
        v = run_cli("verify", str(run_dir))
        assert v.returncode == 0, v.stdout + v.stderr


def _limit_file_size(nbytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


def test_a_file_size_limit_is_a_write_error_with_a_record(sim: SimHandle, tmp_path: Path) -> None:
    """``ulimit -f``: EFBIG (not a SIGXFSZ kill) stops issuing; the record, a new file under
    the limit, is still written. Needs no root."""
    r = run_cli(
        *run_args(
            sim,
            tmp_path,
            "--duration",
            "60",
            "--max-tokens",
            "8",
            "--concurrency",
            "32",
            "--no-nvml",
        ),
        preexec_fn=_limit_file_size(700 * 1024),
    )
    assert r.returncode == 5, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"file size limit reached ({errno.errorcode[errno.EFBIG]}" in r.stderr, r.stderr
    run_dir = only_dir(tmp_path)
    rec = record(run_dir)
    assert rec["reasons"][0]["code"] == "storage_error"
    assert_whole_journals(run_dir)
