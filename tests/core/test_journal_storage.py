"""Journals on a failing disk: whole lines only, one report, nothing raised on the hot path."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import orjson
import pytest

from soak.record import journal as journal_mod
from soak.record.journal import (
    RESERVE_NAME,
    JsonlWriter,
    read_jsonl,
    release_reserve,
    repair_tail,
    reserve_space,
    storage_words,
)
from soak.record.models import write_atomic


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_a_short_write_is_cut_back_to_the_last_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "requests.jsonl"
    failures: list[tuple[str, int | None]] = []
    w = JsonlWriter(path, lambda wr, err: failures.append((wr.path.name, err.errno)))
    w.write({"n": 1})
    real_write = os.write

    calls = []

    def short_write(fd: int, data: bytes) -> int:  # the file system takes half a line
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data[: len(data) // 2])

    # the journal's own ``os``: an import, not an export, so strict mypy refuses the attribute
    monkeypatch.setattr(journal_mod.os, "write", short_write)  # type: ignore[attr-defined]
    w.write({"n": 2, "pad": "x" * 100})
    monkeypatch.setattr(journal_mod.os, "write", real_write)  # type: ignore[attr-defined]
    w.write({"n": 3})  # dropped: the journal has failed
    w.close()

    assert _lines(path) == [b'{"n":1}\n'], "the torn half line must be cut off"
    assert failures == [("requests.jsonl", errno.ENOSPC)], "reported exactly once"
    assert w.lines == 1 and w.dropped == 2
    assert [d["n"] for d in read_jsonl(path)] == [1]


def test_a_write_error_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "telemetry.jsonl"
    seen: list[OSError] = []
    w = JsonlWriter(path, lambda _w, err: seen.append(err))

    def full(_fd: int, _data: bytes) -> int:
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(journal_mod.os, "write", full)  # type: ignore[attr-defined]
    for i in range(5):
        w.write({"i": i})  # never raises
    assert len(seen) == 1 and w.dropped == 5
    assert storage_words(seen[0]) == "disk quota exceeded (EDQUOT: Disk quota exceeded)"
    w.close()
    assert path.read_bytes() == b""


def test_repair_tail_cuts_only_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n{"a":3, "tor')
    assert repair_tail(path) == b'{"a":3, "tor'
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert repair_tail(path) == b"", "a whole journal is left alone"
    one = tmp_path / "one.jsonl"
    one.write_bytes(b"x" * 70_000)  # a torn first line longer than the search block
    assert repair_tail(one) == b"x" * 70_000 and one.read_bytes() == b""
    assert repair_tail(tmp_path / "missing.jsonl") == b""


def test_reserve_holds_space_and_is_released(tmp_path: Path) -> None:
    reserve_space(tmp_path, 256 * 1024)
    held = tmp_path / RESERVE_NAME
    assert held.stat().st_size == 256 * 1024
    assert os.stat(held).st_blocks * 512 >= 256 * 1024, "the blocks are really allocated"
    assert release_reserve(tmp_path) and not held.exists()
    assert not release_reserve(tmp_path)


def test_write_atomic_leaves_no_half_file_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    target.write_bytes(b'{"old": true}')

    def boom(_src: object, _dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, orjson.dumps({"new": True}))
    assert target.read_bytes() == b'{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_disk_that_fails_after_the_verdict_still_exits_5_and_says_so() -> None:
    from soak.judge.verdict import status_of
    from soak.record.models import Reason, Status, exit_code_for
    from soak.run.finalize import storage_reasons_after

    passed = [Reason(code="load_ok", effect="note", message="load: 0 failures")]
    after = storage_reasons_after(
        passed, "disk full (ENOSPC: No space left on device) writing snapshots.jsonl", {}
    )
    assert status_of(after) is Status.PASSED, "whole figures: the verdict stands"
    assert exit_code_for(status_of(after), after) == 5, "…but the exit code says storage"
    assert "could not be written while the record was made" in after[-1].message
    during = [Reason(code="storage_error", effect="aborted", message="the run directory …")]
    again = storage_reasons_after(during, "x", {"requests.jsonl": 3, "events.jsonl": 0})
    assert len(again) == 1 and again[0].message.endswith("not written: 3 lines of requests.jsonl")


def test_a_summary_csv_that_does_not_fit_is_said_in_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """summary.csv goes first, so the record can say it is missing and exit 5."""
    from soak.record.models import RunRecord, Status, load_record
    from soak.run import finalize

    record = RunRecord(
        run_id="r", status=Status.PASSED, exit_code=0, config={}, started_at="", ended_at=""
    )
    real = finalize.write_atomic  # type: ignore[attr-defined]  # the name finalize calls

    def csv_fails(path: Path, data: bytes) -> None:
        if path.name == "summary.csv":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(finalize, "write_atomic", csv_fails)
    assert finalize.write_final(tmp_path, record) == 5
    rec = load_record(tmp_path)
    assert rec.status is Status.PASSED and rec.exit_code == 5
    assert rec.reasons[-1].code == "storage_error"
    assert rec.reasons[-1].message.startswith("summary.csv could not be written (disk full")
