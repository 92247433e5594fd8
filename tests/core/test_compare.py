"""``soaktop compare`` and ``soaktop runs``: the seed-000 table from real demo records.

The fixtures (tests/report/fixtures) are two ``soaktop demo --headless --duration 6`` runs:
``passed`` (healthy) and ``post-load-500`` (one HTTP 500 on an after-load JSON probe).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from soak.after.compare import (
    NotARunDir,
    compare,
    comparison_json,
    list_runs,
    read_run,
    render_markdown,
    render_runs,
    render_text,
    verdict_words,
)
from soak.cli.reports import add_parsers

FIXTURES = Path(__file__).parents[1] / "report" / "fixtures"
PASSED, FAILED = FIXTURES / "passed", FIXTURES / "post-load-500"

SEED_ROWS = [
    "Configuration",
    "Completed requests",
    "Load-phase request failures",
    "Elapsed including drain",
    "Aggregate output tokens/s",
    "P99 first-token latency",
    "P99 whole-request latency",
    "JSON before / after",
    "Tools before / after",
    "Whole-run verdict",
]


def _record(run: Path) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((run / "record.json").read_text())
    return rec


def _copy(src: Path, dst: Path, **changes: Any) -> Path:
    """A copy of a fixture run whose record has ``changes`` applied (top-level keys)."""
    shutil.copytree(src, dst)
    rec = _record(dst) | changes
    (dst / "record.json").write_text(json.dumps(rec))
    return dst


def _cli(*argv: str) -> int:
    ap = argparse.ArgumentParser(prog="soaktop")
    add_parsers(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(argv)
    rc: int = ns.handler(ns)
    return rc


def test_compare_reproduces_the_seed_table_with_the_right_verdicts():
    p, f = read_run(PASSED), read_run(FAILED)
    table = compare([p, f])
    rows = {r[0]: r[1:] for r in table.rows}
    assert [r[0] for r in table.rows if not r[0].startswith("config ")] == SEED_ROWS
    rec_p, rec_f = _record(PASSED), _record(FAILED)
    assert rows["Completed requests"] == [
        f"{rec_p['load']['completed']:,}",
        f"{rec_f['load']['completed']:,}",
    ]
    assert rows["Load-phase request failures"] == ["0", "0"]
    assert rows["Elapsed including drain"][1] == f"{rec_f['load']['elapsed_s']:,.2f} s"
    assert rows["Aggregate output tokens/s"][0] == f"{rec_p['load']['output_tokens_per_s']:,.3f}"
    assert rows["P99 first-token latency"][1] == f"{rec_f['load']['ttft_s']['p99']:.3f} s"
    assert rows["P99 whole-request latency"][0] == f"{rec_p['load']['e2e_s']['p99']:.3f} s"
    assert rows["JSON before / after"] == ["24/24 / 24/24", "24/24 / 23/24"]
    assert rows["Tools before / after"] == ["8/8 / 8/8", "8/8 / 8/8"]
    assert rows["Whole-run verdict"] == ["Passed recorded checks", "Failed post-load JSON check"]
    assert rows["Configuration"][0] == (
        "concurrency 32 · 2 replicas · 262,144 KV tokens/replica · 90% GPU memory"
    )


def test_markdown_has_the_seed_shape_and_text_aligns_columns():
    table = compare([read_run(PASSED), read_run(FAILED)])
    md = render_markdown(table).splitlines()
    ids = [_record(PASSED)["run_id"], _record(FAILED)["run_id"]]
    assert md[0] == f"| Measurement | {ids[0]} | {ids[1]} |"
    assert md[1] == "|---|---|---|"
    assert "| JSON before / after | 24/24 / 24/24 | 24/24 / 23/24 |" in md
    assert "| Whole-run verdict | Passed recorded checks | Failed post-load JSON check |" in md
    text = render_text(table).splitlines()
    col = text[0].index(ids[1])
    verdict = next(line for line in text if line.startswith("Whole-run verdict"))
    assert verdict[col:].startswith("Failed post-load JSON check")


def test_json_output_carries_figures_verdicts_and_validity():
    out = comparison_json(compare([read_run(PASSED), read_run(FAILED)]))
    p, f = out["runs"]
    assert (p["status"], p["valid"], p["verdict"]) == ("PASSED", True, "Passed recorded checks")
    assert f["gates"]["json"] == {"before": "24/24", "after": "23/24"}
    assert f["figures"]["completed"] == _record(FAILED)["load"]["completed"]
    assert f["configuration"]["token_slots"] == [262144, 262144]
    assert out["rows"][-1][0] == "Whole-run verdict"
    json.dumps(out)  # serialisable as is


def test_only_differing_config_keys_are_shown(tmp_path):
    rec = _record(PASSED)
    other = _copy(
        PASSED,
        tmp_path / "other",
        config=rec["config"] | {"concurrency": 64, "max_tokens": 256, "out": "/elsewhere"},
    )
    table = compare([read_run(PASSED), read_run(other)])
    config_rows = [r for r in table.rows if r[0].startswith("config ")]
    assert config_rows == [["config max_tokens", "128", "256"]]  # `out` is not a difference
    assert table.rows[0][2].startswith("concurrency 64 · ")
    assert set(table.differences) == {"concurrency", "max_tokens"}


def test_invalid_and_aborted_runs_are_shown_as_such_and_flagged(tmp_path):
    invalid = _copy(
        PASSED,
        tmp_path / "invalid",
        status="INVALID",
        exit_code=3,
        reasons=[
            {
                "code": "barrier_not_reached",
                "effect": "invalid",
                "message": "only 12 of 32 workers started (20× can't start new thread); "
                "no load was measured",
            }
        ],
    )
    aborted = _copy(
        FAILED,
        tmp_path / "aborted",
        status="ABORTED",
        exit_code=4,
        reasons=[{"code": "aborted", "effect": "aborted", "message": "operator abort (SIGINT)"}],
    )
    table = compare([read_run(PASSED), read_run(invalid), read_run(aborted)])
    rows = {r[0]: r[1:] for r in table.rows}
    verdicts = rows["Whole-run verdict"]
    assert verdicts[0] == "Passed recorded checks"
    assert verdicts[1].startswith("Invalid: only 12 of 32 workers started (20× can't start")
    assert verdicts[2] == "Aborted: operator abort (SIGINT)"
    completed = rows["Completed requests"]
    assert not completed[0].endswith(")")
    assert completed[1].endswith("(invalid)") and completed[2].endswith("(aborted)")
    assert rows["JSON before / after"][2] == "24/24 / 23/24 (aborted)"
    text = render_text(table)
    assert "INVALID — its figures are not a valid measurement" in text
    data = comparison_json(table)["runs"]
    assert [r["valid"] for r in data] == [True, False, False]


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (
            ("load_failures", "176 of 456 load requests failed: 64 connect_error, 96 http_5xx"),
            "Failed load-phase requests (176 of 456 failed)",
        ),
        (
            ("gate_failed", "canary (during load) tools 3/4: tools#2 (x) bad arguments"),
            "Failed canary Tools check",
        ),
        (
            ("gate_failed", "before-load json 20/24: json#3 (a) invalid JSON (contract)"),
            "Failed pre-load JSON check",
        ),
        (
            ("server_fault", "endpoint 1 log: CUDA illegal memory access at 17 s: <log line>"),
            "Failed: endpoint 1 log: CUDA illegal memory access at 17 s",
        ),
    ],
)
def test_failed_verdict_words(tmp_path, reason, words):
    code, message = reason
    reasons = [
        {"code": code, "effect": "failed", "message": message},
        {"code": "load_clean", "effect": "note", "message": "load: 0 failures"},
    ]
    run = _copy(FAILED, tmp_path / "r", reasons=reasons)
    assert verdict_words(read_run(run)) == words


def test_a_record_that_fails_validation_is_read_and_its_problems_named(tmp_path):
    run = _copy(PASSED, tmp_path / "future", from_the_future={"x": 1})
    rec = _record(run)
    del rec["exit_code"]
    (run / "record.json").write_text(json.dumps(rec))
    view = read_run(run)
    assert view.status == "PASSED"
    assert "missing field exit_code" in view.problems
    assert "field from_the_future is not in this soaktop's record schema" in view.problems
    table = compare([view, read_run(FAILED)])
    assert table.rows[-1][1] == "Passed recorded checks"
    assert "record missing field exit_code" in render_text(table)


def test_unreadable_record_and_not_a_run_dir(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "record.json").write_text('{"run_id": "x", "sta')
    assert read_run(broken).status == "unreadable"
    with pytest.raises(NotARunDir, match=str(tmp_path / "empty")):
        (tmp_path / "empty").mkdir()
        read_run(tmp_path / "empty")


def _run_dir_without_record(path: Path, pid: int, mtime: float) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "runner.pid").write_text(f"{pid}\n")
    os.utime(path / "config.json", (mtime, mtime))
    return path


def test_runs_lists_newest_first_with_running_and_no_record(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    old = _copy(PASSED, folder / "old", started_at="2020-01-01T00:00:00+00:00")
    new = _copy(FAILED, folder / "new", started_at="2030-01-01T00:00:00+00:00")
    # A live process whose command line names soak.run.runner stands in for a runner.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "soak.run.runner"],
    )
    try:
        _run_dir_without_record(folder / "live", proc.pid, 1.9e9)  # 2030-03
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        _run_dir_without_record(folder / "died", int(dead.stdout), 1.0e9)  # 2001
        (folder / "not-a-run").mkdir()
        views = list_runs(folder)
        assert [v.path.name for v in views] == ["live", "new", "old", "died"]
        assert [v.status for v in views] == ["running", "FAILED", "PASSED", "no record"]
        text = render_runs(views).splitlines()
    finally:
        proc.kill()
        proc.wait()
    assert text[0].split() == [
        "RUN",
        "STATUS",
        "COMPLETED",
        "OUT",
        "TOK/S",
        "P99",
        "TTFT",
        "FIRST",
        "REASON",
    ]
    failed_line = next(line for line in text if line.startswith(_record(new)["run_id"]))
    assert "FAILED" in failed_line and "after-load json 23/24" in failed_line
    assert f"{_record(new)['load']['ttft_s']['p99']:.3f} s" in failed_line
    assert next(line for line in text if line.startswith("live")).split()[1] == "running"
    assert old.name not in {v.run_id for v in views}  # run ids come from the records


def test_cli_usage_errors_name_the_path(tmp_path, capsys):
    assert _cli("compare", str(PASSED), str(tmp_path)) == 2
    assert f"{tmp_path} is not a soaktop run directory" in capsys.readouterr().err
    assert _cli("runs", str(tmp_path / "nope")) == 2
    assert f"{tmp_path / 'nope'} is not a directory" in capsys.readouterr().err


def test_cli_compare_text_json_and_markdown(tmp_path, capsys):
    md = tmp_path / "table.md"
    assert _cli("compare", str(PASSED), str(FAILED), "--markdown", str(md)) == 0
    out = capsys.readouterr().out
    assert "Failed post-load JSON check" in out and out.startswith("Measurement")
    assert md.read_text() == render_markdown(compare([read_run(PASSED), read_run(FAILED)]))
    assert _cli("compare", str(PASSED), str(FAILED), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in data["runs"]] == [
        "Passed recorded checks",
        "Failed post-load JSON check",
    ]
    assert _cli("runs", str(FIXTURES), "--json") == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {x["status"] for x in lines} == {"PASSED", "FAILED"}


# --- the timeline (schema 1.2): "Drift first → last" and each run's drift/leak table ----


def _timeline_runs(tmp_path: Path) -> list[Path]:
    from tests.report import endurance_runs as er

    return [
        er.write_run(tmp_path / "decay", er.decaying()),
        er.write_run(tmp_path / "stable", er.stable()),
        er.write_run(tmp_path / "short", er.short(), er.windows(4)),
        PASSED,  # schema 1.1: no window series
    ]


def test_the_drift_row_says_drift_stable_not_judged_and_older(tmp_path):
    table = compare([read_run(p) for p in _timeline_runs(tmp_path)])
    labels = [r[0] for r in table.rows]
    at = labels.index("Drift first → last")
    assert labels[at - 1] == "P99 whole-request latency" and labels[-1] == "Whole-run verdict"
    assert table.rows[at][1:] == [
        "throughput −31 %, TTFT p99 +420 %, server RSS +212 MB/h",
        "stable",
        "not judged (4 windows)",
        "not judged (no window series)",
    ]
    data = comparison_json(table)["runs"]
    assert [r["drift"] for r in data] == [*table.rows[at][1:3], "not judged (4 windows)", None]
    assert data[0]["endurance"]["leaks"][0]["rate_per_h"] == 212.0
    assert data[3]["endurance"] is None
    md = render_markdown(table)
    assert "| Drift first → last | throughput −31 %, TTFT p99 +420 %, server RSS +212 MB/h |" in md


def test_the_drift_row_of_an_invalid_run_is_flagged(tmp_path):
    from tests.report import endurance_runs as er

    run = er.write_run(tmp_path / "invalid", er.decaying(), status="INVALID")
    rows = {r[0]: r[1:] for r in compare([read_run(run), read_run(PASSED)]).rows}
    assert rows["Drift first → last"][0].endswith("server RSS +212 MB/h (invalid)")


def test_compare_text_shows_each_runs_drift_and_leak_table_below(tmp_path):
    views = [read_run(p) for p in _timeline_runs(tmp_path)]
    text = render_text(compare(views))
    head, _, below = text.partition("\n\nDrift and leaks: ")
    assert "Drift first → last" in head and "Whole-run verdict" in head
    blocks = ("Drift and leaks: " + below).split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [f"Drift and leaks: {v.run_id}" for v in views]
    decay = blocks[0].splitlines()
    assert decay[1] == "  judged on 30 windows of 60 s: baseline windows 0–4, end windows 25–29"
    throughput = next(line for line in decay if line.startswith("  throughput"))
    assert re.split(r"\s{2,}", throughput.strip()) == [
        "throughput",
        "4,210 tok/s → 2,905 tok/s",
        "−31 %",
        "falling −650 tok/s [−700, −600], p<0.001",
        "load+00:00:59",
        "drift",
    ]
    assert "load+00:20:00 (fault: engine restart)" in blocks[0]
    assert "1 more figure stable (soaktop report shows every one)" in blocks[0]
    leak = next(line for line in decay if line.startswith("  server RSS"))
    assert "+212 MB/h [180, 240], p<0.001" in leak and leak.endswith("leak")
    assert blocks[2].splitlines()[1] == "  not judged: 4 windows of 60 s; a trend needs 6"
    assert blocks[3].splitlines()[1] == (
        "  the record predates the window series (soaktop schema 1.2)"
    )


def test_records_before_the_timeline_compare_as_before():
    text = render_text(compare([read_run(PASSED), read_run(FAILED)]))
    assert "Drift" not in text
