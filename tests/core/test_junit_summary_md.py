"""``--summary-md``: the verdict first, then the seed-000 table in Markdown, with a
server's text unable to break a cell, a line or the page (pipes, controls, markup)."""

from __future__ import annotations

from pathlib import Path

from soak.after.run_view import read_run
from soak.outputs.summary_md import REASONS_SHOWN, append_summary, md_text, summary_markdown
from soak.record.models import RunRecord
from tests.core.test_junit import _failure
from tests.core.test_junit import _record as _junit_record

GATES = {  # as a journal holds them: a record on disk is UTF-8 (no lone surrogate)
    "before": {"json": {"passed": 24, "total": 24}},
    "after": {
        "json": {"passed": 23, "total": 24, "failures": [_failure("json#7", reason="HTTP 500")]}
    },
}


def _record(**over: object) -> RunRecord:
    return _junit_record(**({"gates": GATES} | over))


PIPE_REASON = "after-load json 23/24: json#7 HTTP 500: a|b\x1b[2J\nsecond line <img src=x>"


def _run_dir(tmp_path: Path, rec: RunRecord) -> Path:
    d = tmp_path / rec.run_id
    d.mkdir()
    (d / "record.json").write_text(rec.model_dump_json())
    return d


def _table(md: str) -> list[list[str]]:
    """The Markdown table's rows, split on the pipes a reader splits on (not ``\\|``)."""
    import re

    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in rows]


def test_the_verdict_comes_first_then_the_seed_table(tmp_path):
    rec = _record(reasons=[{"code": "gate_failed", "effect": "failed", "message": PIPE_REASON}])
    md = summary_markdown(read_run(_run_dir(tmp_path, rec)))
    first = md.splitlines()[0]
    assert first.startswith("## soaktop: FAILED — Failed post-load JSON check")
    table = _table(md)
    assert table[0] == ["Measurement", md_text(rec.run_id)]
    rows = {r[0]: r[1:] for r in table[1:]}
    assert rows["JSON before / after"] == ["24/24 / 23/24"]
    assert rows["Whole-run verdict"] == ["Failed post-load JSON check"]
    assert all(len(r) == 2 for r in table)  # no cell split by a server's pipe


def test_a_servers_pipes_controls_and_markup_stay_text(tmp_path):
    rec = _record(reasons=[{"code": "gate_failed", "effect": "failed", "message": PIPE_REASON}])
    md = summary_markdown(read_run(_run_dir(tmp_path, rec)))
    assert "\x1b" not in md
    line = next(ln for ln in md.splitlines() if ln.startswith("- **failed**"))
    # one line; Markdown renders it as a|b\x1b[2J\nsecond line <img src=x>
    assert r"a\|b\\x1b\[2J\\nsecond line &lt;img src=x&gt;" in line
    assert "<img" not in md


def test_reasons_are_bounded_and_notes_come_after_verdict_reasons(tmp_path):
    reasons = [{"code": "n", "effect": "note", "message": "a note"}] + [
        {"code": f"r{i}", "effect": "failed", "message": "x" * 5000} for i in range(30)
    ]
    md = summary_markdown(read_run(_run_dir(tmp_path, _record(reasons=reasons))))
    listed = [ln for ln in md.splitlines() if ln.startswith("- **")]
    assert len(listed) == REASONS_SHOWN and all(ln.startswith("- **failed**") for ln in listed)
    assert max(len(ln) for ln in listed) < 600
    assert "- … and 11 more (record.json)" in md


def test_append_adds_to_a_step_summary_that_has_content(tmp_path):
    d = _run_dir(tmp_path, _record(status="PASSED", exit_code=0, reasons=[]))
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step output\n")
    append_summary(read_run(d), summary)
    text = summary.read_text()
    assert text.startswith("# earlier step output\n## soaktop: PASSED — Passed recorded checks")


def test_md_text_escapes_what_markdown_reads_as_markup():
    assert md_text("a|b") == "a\\|b"
    assert md_text("x_y*z`w") == "x\\_y\\*z\\`w"
    assert md_text("<script>&") == "&lt;script&gt;&amp;"
    assert md_text("plain 24/24") == "plain 24/24"


def _cli(*argv: str) -> int:
    import argparse

    from soak.cli.outputs import cmd_junit, cmd_summary_md

    p = argparse.ArgumentParser()
    p.add_argument("run_dir", type=Path)
    p.add_argument("-o", "--output", type=Path)
    ns = p.parse_args(argv[1:])
    return (cmd_junit if argv[0] == "junit" else cmd_summary_md)(ns)


def test_an_output_path_the_os_refuses_is_a_usage_error_not_a_traceback(tmp_path, capsys):
    from soak.cli.outputs import path_problem

    long = tmp_path / ("x" * 300)  # longer than a file name may be (ENAMETOOLONG)
    why = path_problem("--junit", long)
    assert why is not None and "cannot be used: File name too long" in why
    run_dir = _run_dir(tmp_path, _record(reasons=[]))
    assert _cli("junit", str(run_dir), "-o", str(long)) == 2
    assert "File name too long" in capsys.readouterr().err


def test_a_summary_that_cannot_be_written_exits_5_and_says_why(tmp_path, capsys):
    run_dir = _run_dir(tmp_path, _record(reasons=[]))
    dangling = tmp_path / "summary.md"  # passes the early check, fails at the write
    dangling.symlink_to(tmp_path / "gone" / "summary.md")
    assert _cli("summary-md", str(run_dir), "-o", str(dangling)) == 5
    err = capsys.readouterr().err
    assert f"-o {dangling}: not written: No such file or directory" in err


def test_a_run_that_ended_without_a_record_points_to_recover_not_to_waiting(tmp_path, capsys):
    """The runner died (exit 4, no record.json): the run does not go on, so "once it ends"
    would be wrong; the CLI names ``soaktop recover`` and keeps the run's exit code."""
    import argparse

    from soak.cli.outputs import write_outputs
    from soak.record.models import EXIT_DETACHED_SIGNAL

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ns = argparse.Namespace(junit=tmp_path / "j.xml", summary_md=None)
    assert write_outputs(ns, run_dir, 4) == 4
    err = capsys.readouterr().err
    assert "ended without a record" in err and f"soaktop recover {run_dir}" in err
    assert "goes on" not in err and not (tmp_path / "j.xml").exists()
    assert write_outputs(ns, run_dir, EXIT_DETACHED_SIGNAL) == EXIT_DETACHED_SIGNAL
    assert "(it goes on); once it ends" in capsys.readouterr().err
