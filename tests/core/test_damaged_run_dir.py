"""Every command given a damaged run directory says what is damaged, exits non-zero
(2: the input cannot be used) and never raises: a missing directory, a folder that is not
a run, a record.json truncated / not JSON / of the wrong shape / missing fields / of the
wrong types, a missing config.json, journals with garbage lines or a torn last line.

The commands run in this process through ``soak.cli.main.main`` (a traceback would be an
exception here); one subprocess test checks the same from the outside."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soak.cli.main import main

FIXTURES = Path(__file__).parents[1] / "report" / "fixtures"
PASSED = FIXTURES / "passed"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _run(tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(PASSED, dest)
    return dest


def _record(run: Path) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((run / "record.json").read_text())
    return rec


def _truncated(run: Path) -> str:
    data = (run / "record.json").read_bytes()
    (run / "record.json").write_bytes(data[: len(data) // 2])
    return "invalid JSON at byte"


def _binary(run: Path) -> str:
    (run / "record.json").write_bytes(b"\x00\xff\x1b[2J garbage \x89PNG")
    return "invalid JSON at byte"


def _empty(run: Path) -> str:
    (run / "record.json").write_bytes(b"")
    return "the file is empty"


def _a_list(run: Path) -> str:
    (run / "record.json").write_text("[1, 2, 3]")
    return "it holds a list, not a JSON object"


def _missing_field(run: Path) -> str:
    rec = _record(run)
    del rec["status"]
    (run / "record.json").write_text(json.dumps(rec))
    return "missing field status"


def _wrong_types(run: Path) -> str:
    rec = _record(run)
    rec["load"], rec["exit_code"] = "lots", "zero"
    (run / "record.json").write_text(json.dumps(rec))
    return "field load"


def _a_directory(run: Path) -> str:
    (run / "record.json").unlink()
    (run / "record.json").mkdir()
    return "a directory, not a file"


UNREADABLE = [_truncated, _binary, _empty, _a_list, _a_directory, _wrong_types]
"""Damage no reader can work around: every command refuses (``runs`` lists it as such)."""
OFF_SCHEMA = [_missing_field]
"""A record another soaktop version could have written (fields missing or unknown): view,
attach, verify, decide refuse it; compare, runs and report read it through the models
leniently and name its problems."""


def _decide_args(run: Path) -> list[str]:
    return ["decide", "--before", str(run), "--candidate", str(run), "--restored", str(run)]


STRICT: dict[str, Callable[[Path], list[str]]] = {
    "view": lambda r: ["view", str(r)],
    "attach": lambda r: ["attach", str(r)],
    "verify": lambda r: ["verify", str(r)],
    "decide": _decide_args,
}
TOLERANT: dict[str, Callable[[Path], list[str]]] = {
    "report": lambda r: ["report", str(r), "--html", str(r.parent / "r.html")],
    "compare": lambda r: ["compare", str(r), str(PASSED)],
}


@pytest.mark.parametrize("damage", UNREADABLE + OFF_SCHEMA, ids=lambda f: f.__name__)
@pytest.mark.parametrize("command", sorted(STRICT))
def test_strict_readers_name_the_damage(tmp_path, capsys, command, damage):
    run = _run(tmp_path)
    words = damage(run)
    rc, out, err = _cli(capsys, *STRICT[command](run))
    assert rc == 2, (out, err)
    assert "record.json" in err and words in err, err


@pytest.mark.parametrize("damage", UNREADABLE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("command", sorted(TOLERANT))
def test_report_and_compare_refuse_a_record_that_is_not_json(tmp_path, capsys, command, damage):
    run = _run(tmp_path)
    words = damage(run)
    rc, out, err = _cli(capsys, *TOLERANT[command](run))
    assert rc == 2 and words in err and "is damaged" in err, (out, err)
    assert not (tmp_path / "r.html").exists() and out == ""


@pytest.mark.parametrize("damage", OFF_SCHEMA, ids=lambda f: f.__name__)
def test_compare_runs_and_report_read_an_off_schema_record_and_name_it(tmp_path, capsys, damage):
    run = _run(tmp_path)
    damage(run)
    rc, out, _ = _cli(capsys, "compare", str(run), str(PASSED))
    assert rc == 0 and "record missing field status" in out, out
    rc, out, _ = _cli(capsys, "runs", str(tmp_path))
    assert rc == 0 and _record(run)["run_id"] in out, out
    rc, _, _ = _cli(capsys, "report", str(run), "--html", str(tmp_path / "r.html"))
    assert rc == 0 and "record.json does not match" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("damage", UNREADABLE + OFF_SCHEMA, ids=lambda f: f.__name__)
def test_runs_lists_a_damaged_run_as_damaged(tmp_path, capsys, damage):
    _run(tmp_path, "good")
    bad = _run(tmp_path, "bad")
    damage(bad)
    rc, out, err = _cli(capsys, "runs", str(tmp_path))
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and any("PASSED" in line for line in lines), out
    if damage in UNREADABLE:
        bad_line = next(line for line in lines if line.startswith("bad"))
        assert "unreadable" in bad_line and "record.json is damaged" in bad_line, bad_line


@pytest.mark.parametrize(
    "command",
    ["view", "attach", "verify", "recover", "report", "compare", "runs", "decide"],
)
@pytest.mark.parametrize("what", ["missing", "not-a-run", "a-file"])
def test_every_command_refuses_what_is_not_a_run_directory(tmp_path, capsys, command, what):
    path = tmp_path / what
    words = {"missing": "does not exist", "not-a-run": "is not a soaktop run directory"}
    words["a-file"] = "is not a directory"
    if what == "not-a-run":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
        if command == "runs":  # a folder of runs that holds none: said, and not an error
            assert _cli(capsys, "runs", str(path))[:2] == (0, f"no run directories in {path}\n")
            return
        if command == "decide":
            words["not-a-run"] = "has no record.json"
    elif what == "a-file":
        path.write_text("hello")
    args = {
        "decide": _decide_args(path),
        "compare": ["compare", str(path), str(PASSED)],
    }.get(command, [command, str(path)])
    rc, out, err = _cli(capsys, *args)
    assert rc == 2, (out, err)
    assert str(path) in err and words[what] in err, err


def test_recover_names_a_damaged_record_and_a_missing_config(tmp_path, capsys):
    run = _run(tmp_path)
    _truncated(run)
    rc, _, err = _cli(capsys, "recover", str(run))
    assert rc == 2 and "is damaged: invalid JSON" in err and "move it aside" in err, err
    (run / "record.json").unlink()
    (run / "config.json").write_bytes(b"\x00garbage")
    rc, _, err = _cli(capsys, "recover", str(run))
    assert rc == 2 and "config.json is damaged: invalid JSON" in err, err
    (run / "config.json").unlink()
    (run / "runner.pid").write_text("1\n")  # still a run directory, without its config
    rc, _, err = _cli(capsys, "recover", str(run))
    assert rc == 2 and "has no config.json" in err, err


def _journals(run: Path) -> None:
    """A run's journals with binary garbage lines, a JSON line of the wrong kind and a
    torn last line."""
    (run / "record.json").unlink()
    (run / "events.jsonl").write_bytes(
        b'{"t": 0.1, "wall": "2025-01-01T00:00:00+00:00", "kind": "phase", '
        b'"data": {"phase": "load"}}\n'
        b"\x00\xff\xfe binary garbage\n"
        b"[1, 2]\n"
        b'{"t": 0.5, "kind": "pha'
    )
    (run / "requests.jsonl").write_bytes(b"\x1b[2J\x07not json\n" + b'{"id": 1, "ok": tr')


def test_recover_then_verify_with_damaged_journals(tmp_path, capsys):
    run = _run(tmp_path)
    _journals(run)
    rc, out, err = _cli(capsys, "recover", str(run))
    assert rc == 0, (out, err)  # recovered: the damage is said, in the record and here
    rec = _record(run)
    notes = " ".join(r["message"] for r in rec["reasons"] if r["code"] == "journal_damaged")
    assert "events.jsonl: 2 line(s) are not JSON objects and were skipped (line 2, 3)" in notes
    assert "requests.jsonl: 1 line(s) are not JSON objects" in notes, notes
    assert "note: events.jsonl: 2 line(s) are not JSON objects" in out, out
    # the record owns up to that damage: it agrees with its journals
    rc, out, err = _cli(capsys, "verify", str(run))
    assert rc == 0, (out, err)
    with (run / "probes.jsonl").open("ab") as fh:  # damage the record does not know of
        fh.write(b"\xff\xfe\n")
    rc, out, err = _cli(capsys, "verify", str(run))
    assert rc == 1 and "probes.jsonl: 1 line(s) are not JSON objects" in out, (out, err)
    with (run / "requests.jsonl").open("ab") as fh:
        fh.write(b"\x07 more garbage\n")
    rc, out, err = _cli(capsys, "verify", str(run))
    assert rc == 1 and "requests.jsonl: 2 line(s) are not JSON objects" in out, (out, err)


def test_a_scan_reads_once_what_read_jsonl_reads_and_says_what_journal_problems_says(
    tmp_path,
):
    from soak.record.journal import read_jsonl
    from soak.record.journal_scan import JournalScan
    from soak.record.run_dir import journal_problems

    lines = [b'{"id": %d}\n' % i for i in range(8)]
    lines[2], lines[6] = b"\x1b[2J not json\n", b"[1, 2]\n"
    (tmp_path / "requests.jsonl").write_bytes(b"".join(lines) + b'{"id": 9, "ok": tr')
    scan = JournalScan("requests.jsonl")
    got = list(scan.lines(tmp_path / "requests.jsonl"))
    assert got == list(read_jsonl(tmp_path / "requests.jsonl"))
    assert [x["id"] for x in got] == [0, 1, 3, 4, 5, 7]
    assert scan.done and scan.bad == [3, 7] and scan.torn
    assert scan.problems() == journal_problems(tmp_path, ("requests.jsonl",))
    assert scan.problems()[0] == (
        "requests.jsonl: 2 line(s) are not JSON objects and were skipped (line 3, 7)"
    )
    with pytest.raises(RuntimeError, match="once"):
        list(scan.lines(tmp_path / "requests.jsonl"))
    missing = JournalScan("telemetry.jsonl")
    assert list(missing.lines(tmp_path / "telemetry.jsonl")) == [] and missing.done
    assert missing.problems() == []


def test_wrong_shaped_journal_lines_are_a_sentence(tmp_path, capsys):
    run = _run(tmp_path)
    (run / "record.json").unlink()
    (run / "events.jsonl").write_text(
        json.dumps({"t": "soon", "kind": "phase", "data": "nope"})
        + "\n"
        + json.dumps({"t": 1.0, "kind": "barrier", "data": {"requested": "many"}})
        + "\n"
    )
    rc, out, err = _cli(capsys, "recover", str(run))
    assert rc == 2 and "wrong" in err and str(run) in err, (out, err)
    assert not (run / "record.json").exists()


def test_from_the_outside_view_of_a_corrupt_record_is_one_sentence(tmp_path):
    run = _run(tmp_path)
    _truncated(run)
    p = subprocess.run(
        [sys.executable, "-m", "soak", "view", str(run)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"{run}/record.json is damaged: invalid JSON at byte" in p.stderr


def test_a_recover_that_fails_puts_the_torn_tails_back(tmp_path, capsys):
    run = _run(tmp_path)
    (run / "record.json").unlink()
    events = json.dumps({"kind": "phase", "t": "abc", "data": {"phase": "load"}}) + "\n"
    (run / "events.jsonl").write_text(events)
    before = b'{"id": "a", "ok": true}\n{"id":"torn","ph'
    (run / "requests.jsonl").write_bytes(before)
    rc, out, err = _cli(capsys, "recover", str(run))
    assert rc == 2 and "Traceback" not in out + err, (out, err)
    assert not (run / "record.json").exists()
    assert (run / "requests.jsonl").read_bytes() == before, "nothing was changed"
