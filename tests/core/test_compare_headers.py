"""``soaktop compare``'s column headers from the recipe, the differences and caveats under
the table, and the run's status label in every output (issue 15 parts 1, 4 and 5).

Records are the demo fixtures (tests/report/fixtures, schema 1.0) with the schema-1.3
recipe facts written into them by hand: what ``soak.run.identity`` records once an
engine states them (``/server_info`` and the like).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from soak.after.compare import compare, comparison_json, read_run, render_markdown, render_text
from soak.after.report import build_report
from soak.after.report.compare_page import build_compare_page
from soak.after.runs_csv import RUNS_CSV_COLUMNS, runs_csv
from soak.cli.headless import final_report
from soak.cli.reports import add_parsers
from soak.record.models import RunRecord
from soak.record.status_label import figures_valid, label_of, status_label, status_words
from soak.record.summary_csv import SUMMARY_COLUMNS, summary_csv

FIXTURES = Path(__file__).parents[1] / "report" / "fixtures"
PASSED, FAILED = FIXTURES / "passed", FIXTURES / "post-load-500"
STUB = "/* plotly stub */"


def _record(run: Path) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((run / "record.json").read_text())
    return rec


def _run(
    src: Path,
    dst: Path,
    *,
    label: str | None = None,
    stated: dict[str, str] | None = None,
    memory: str | None = None,
    declared: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    **changes: Any,
) -> Path:
    """A copy of a fixture run: its label, each endpoint's stated recipe facts and memory
    target, the operator's declared facts, config keys and top-level keys changed."""
    shutil.copytree(src, dst)
    rec = _record(dst)
    if label is not None:
        rec["config"]["label"] = label
    rec["config"].update(config or {})
    for ep in rec["identity"]["endpoints"]:
        if stated is not None:
            ep["recipe"] = stated
        if memory is not None:
            ep["cache_config"]["gpu_memory_utilization"] = memory
    if declared is not None:
        rec["identity"]["recipe"] = {"declared": declared}
    rec |= changes
    (dst / "record.json").write_text(json.dumps(rec))
    return dst


def _two_recipes(tmp_path: Path) -> tuple[Path, Path]:
    """Seed 000's pair: 32 slots at 95% against 64 at 90% with drafting, not otherwise
    identical (KV precision, context length, max_tokens)."""
    base = _run(
        PASSED,
        tmp_path / "base",
        label="baseline",
        stated={"max_num_seqs": "32", "speculative": "off", "kv_cache_dtype": "fp8"},
        memory="0.95",
        declared={"revision": "2cba9e42", "image": "vllm-patched:1"},
    )
    cand = _run(
        FAILED,
        tmp_path / "cand",
        label="dspark-k3",
        stated={"max_num_seqs": "64", "speculative": "K3", "kv_cache_dtype": "auto"},
        memory="0.9",
        declared={"revision": "2cba9e42", "image": "vllm-patched:1"},
        config={"max_tokens": 256},
    )
    return base, cand


def _cli(*argv: str) -> int:
    ap = argparse.ArgumentParser(prog="soaktop")
    add_parsers(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(argv)
    rc: int = ns.handler(ns)
    return rc


# --- headers from the recipe ---------------------------------------------------------


def test_headers_name_the_recipe_facts_that_differ_seed_000(tmp_path):
    base, cand = _two_recipes(tmp_path)
    table = compare([read_run(base), read_run(cand)])
    assert table.header == [
        "Measurement",
        "baseline · 32 slots/replica · 95% GPU memory · spec off",
        "dspark-k3 · 64 slots/replica · 90% GPU memory · spec K3",
    ]
    # labels head the columns, so the run ids are the first row
    assert table.rows[0] == ["Run", _record(base)["run_id"], _record(cand)["run_id"]]
    labels = [r[0] for r in table.rows]
    assert labels[1] == "Configuration" and "config max_tokens" in labels
    assert [d.text(table.headers.names) for d in table.headers.others] == [
        "KV cache precision (kv_cache_dtype): baseline fp8 / dspark-k3 auto",
        "config max_tokens: baseline 128 / dspark-k3 256",
    ]
    text = render_text(table)
    assert "Other differences:\n  - KV cache precision (kv_cache_dtype): baseline fp8" in text
    assert "Same recipe" not in text
    md = render_markdown(table).splitlines()
    assert md[0] == (
        "| Measurement | baseline · 32 slots/replica · 95% GPU memory · spec off "
        "| dspark-k3 · 64 slots/replica · 90% GPU memory · spec K3 |"
    )
    assert "- config max_tokens: baseline 128 / dspark-k3 256" in md
    out = comparison_json(table)
    assert [h["header"] for h in out["headers"]] == table.header[1:]
    assert out["headers"][0]["facts"] == [
        {"key": "max_num_seqs", "value": "32"},
        {"key": "gpu_memory_utilization", "value": "0.95"},
        {"key": "speculative", "value": "off"},
    ]
    assert out["headers"][1]["recipe"]["revision"] == "2cba9e42"
    assert [d["key"] for d in out["other_differences"]] == ["kv_cache_dtype", "config max_tokens"]
    assert out["same_recipe"] is None and out["header"] == table.header
    page = build_compare_page(table, plotly_js=STUB)
    assert "dspark-k3 · 64 slots/replica · 90% GPU memory · spec K3" in page
    assert "Other differences" in page and "baseline fp8 / dspark-k3 auto" in page


def test_at_most_three_facts_in_a_header_admission_capacity_first(tmp_path):
    a = _run(
        PASSED,
        tmp_path / "a",
        stated={"version": "0.31", "tensor_parallel_size": "4", "max_num_seqs": "32"},
        memory="0.95",
        config={"concurrency": 128},
    )
    b = _run(
        PASSED,
        tmp_path / "b",
        stated={"version": "0.32", "tensor_parallel_size": "8", "max_num_seqs": "64"},
        memory="0.9",
    )
    table = compare([read_run(a), read_run(b)])
    ids = [_record(a)["run_id"], _record(b)["run_id"]]
    # both labelled "demo": the names are the run ids, and there is no Run row
    assert table.header[1:] == [
        f"{ids[0]} · 32 slots/replica · 95% GPU memory · concurrency 128",
        f"{ids[1]} · 64 slots/replica · 90% GPU memory · concurrency 32",
    ]
    assert table.rows[0][0] == "Configuration"
    others = [d.key for d in table.headers.others]
    assert others == ["version", "tensor_parallel_size"]  # nothing dropped


def test_identical_recipes_say_so(tmp_path):
    table = compare([read_run(PASSED), read_run(FAILED)])
    same = table.headers.same_recipe
    assert same == "vllm · version 0.32.0 · 90% GPU memory · 262,144 KV tokens · KV auto (8 facts)"
    assert f"\nSame recipe: {same}\n" in render_text(table)
    assert comparison_json(table)["same_recipe"] == same
    assert f"Same recipe:\n- {same}" in render_markdown(table)
    assert table.header[1:] == [_record(PASSED)["run_id"], _record(FAILED)["run_id"]]


def test_a_fact_only_one_run_states_differs_and_reads_as_unknown(tmp_path):
    new = _run(PASSED, tmp_path / "new", label="new", stated={"max_num_seqs": "16"})
    old = _run(PASSED, tmp_path / "old", label="old")
    table = compare([read_run(new), read_run(old)])
    assert table.header[1:] == ["new · 16 slots/replica", "old · ? slots/replica"]


# --- caveats -------------------------------------------------------------------------

CLOSED = {"code": "closed_loop", "message": "closed loop: not an arrival distribution"}
POOL = {"code": "prompt_pool_cycled", "message": "a fixed pool of 256 prompts, cycled"}
DRAIN = {"code": "drain_in_denominator", "message": "the drain is inside the denominator"}


def test_caveats_shared_once_and_each_runs_own(tmp_path):
    a = _run(PASSED, tmp_path / "a", label="base", caveats=[CLOSED, POOL, DRAIN])
    b = _run(FAILED, tmp_path / "b", label="cand", caveats=[CLOSED, POOL])
    table = compare([read_run(a), read_run(b)])
    text = render_text(table)
    assert (
        "Caveats, both runs:\n  - closed loop: not an arrival distribution\n"
        "  - a fixed pool of 256 prompts, cycled\n"
        "Caveats, base: the drain is inside the denominator\n"
    ) in text
    assert "Caveats, cand" not in text
    md = render_markdown(table)
    assert "Caveats, both runs:\n- closed loop: not an arrival distribution\n" in md
    out = comparison_json(table)
    assert out["caveats"]["shared"] == [CLOSED, POOL]
    assert out["caveats"]["runs"] == [
        {"name": "base", "caveats": [DRAIN]},
        {"name": "cand", "caveats": []},
    ]
    assert out["runs"][0]["caveats"] == [CLOSED, POOL, DRAIN]
    page = build_compare_page(table, plotly_js=STUB)
    assert "Caveats, both runs" in page and "the drain is inside the denominator" in page


def test_records_without_caveats_show_none(tmp_path):
    text = render_text(compare([read_run(PASSED), read_run(FAILED)]))
    assert "Caveats" not in text


# --- the status label ------------------------------------------------------------------

GPU_FAULT = {
    "code": "server_fault",
    "effect": "failed",
    "message": "endpoint 1 log: CUDA illegal memory access at 17 s: async output copy",
}
THREADS = {
    "code": "barrier_not_reached",
    "effect": "invalid",
    "message": "only 12 of 32 workers started (20× can't start new thread); no load was measured",
}


def _invalid_failed(tmp_path: Path, name: str = "adaptive") -> Path:
    return _run(
        PASSED,
        tmp_path / name,
        label=name,
        status="INVALID",
        exit_code=3,
        reasons=[THREADS, GPU_FAULT],
        run_id=f"{name}__1012-0000",
    )


def test_the_label_keeps_invalid_and_failed():
    assert label_of("INVALID", ["invalid", "failed", "note"]) == "INVALID + FAILED"
    assert label_of("ABORTED", ["aborted", "failed"]) == "ABORTED + FAILED"
    assert label_of("INVALID", ["invalid"]) == "INVALID"
    assert label_of("FAILED", ["failed"]) == "FAILED"
    assert label_of("running", []) == "running"


def test_an_invalid_and_failed_run_says_both_in_compare(tmp_path):
    bad = _invalid_failed(tmp_path)
    good = _run(FAILED, tmp_path / "k3", label="k3")
    table = compare([read_run(bad), read_run(good)])
    rows = {r[0]: r[1:] for r in table.rows}
    assert rows["Whole-run verdict"][0] == (
        "Invalid as a load measurement (only 12 of 32 workers started (20× can't start new "
        "thread); no load was…) and failed as a server attempt (endpoint 1 log: CUDA "
        "illegal memory access at 17 s)"
    )
    for row in ("Aggregate output tokens/s", "P99 first-token latency", "Completed requests"):
        assert rows[row][0].endswith(" (invalid)") and not rows[row][1].endswith(")")
    rid = _record(bad)["run_id"]
    assert f"note: {rid}: INVALID + FAILED — its figures are not a valid" in render_text(table)
    assert "(invalid)" in render_markdown(table) and "INVALID + FAILED" in render_markdown(table)
    run = comparison_json(table)["runs"][0]
    assert (run["status"], run["status_label"], run["valid"]) == (
        "INVALID",
        "INVALID + FAILED",
        False,
    )
    assert "INVALID + FAILED" in build_compare_page(table, plotly_js=STUB)


def test_an_invalid_run_is_labelled_in_every_output(tmp_path, capsys):
    folder = tmp_path / "runs"
    folder.mkdir()
    bad = _invalid_failed(folder, "adaptive")
    plain = _run(
        FAILED,
        folder / "threads",
        label="threads",
        status="INVALID",
        exit_code=3,
        reasons=[THREADS],
        started_at="2000-01-01T00:00:00+00:00",
    )
    good = _run(
        PASSED,
        folder / "base",
        label="base",
        run_id="base__1012-0001",
        started_at="2001-01-01T00:00:00+00:00",
    )
    rec = RunRecord.model_validate(_record(bad))
    assert rec.load is not None and rec.load.output_tokens_per_s is not None
    tok = f"{rec.load.output_tokens_per_s:.1f}"
    # the CLI summary (the TUI frontend prints it too)
    summary = final_report(rec, bad)
    first = summary.splitlines()[0]
    assert first.startswith("INVALID + FAILED  ") and first.endswith(
        "(invalid as a load measurement and failed as a server attempt)"
    )
    assert f"output {tok} (invalid) tok/s" in summary and "s (invalid), P99 E2E" in summary
    assert (status_label(rec), figures_valid(rec)) == ("INVALID + FAILED", False)
    assert status_words(rec) == "invalid as a load measurement and failed as a server attempt"
    # summary.csv
    row = next(csv.DictReader(io.StringIO(summary_csv(rec).decode())))
    assert (row["status"], row["status_label"], row["row"]) == (
        "INVALID",
        "INVALID + FAILED",
        "run",
    )
    for col in ("output_tokens_per_s", "p99_ttft_s", "p99_e2e_s"):
        assert row[col].endswith(" (invalid)"), col
    assert row["completed_requests"] == str(rec.load.completed)
    # soaktop runs, text and JSON
    assert _cli("runs", str(folder)) == 0
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if x.startswith(rec.run_id))
    tok_shown = f"{rec.load.output_tokens_per_s:,.1f} (invalid)"
    assert "INVALID + FAILED" in line and tok_shown in line and " s (invalid)" in line
    plain_line = next(x for x in lines if x.startswith(_record(plain)["run_id"]))
    assert " INVALID " in plain_line and "+ FAILED" not in plain_line
    good_line = next(x for x in lines if x.startswith(_record(good)["run_id"]))
    assert "(invalid)" not in good_line
    assert _cli("runs", str(folder), "--json") == 0
    first_json = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first_json["status_label"] == "INVALID + FAILED" and not first_json["figures_valid"]
    # soaktop runs --csv
    out = tmp_path / "results.csv"
    assert _cli("runs", str(folder), "--csv", str(out)) == 0
    assert f"wrote {out} (3 runs)" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [r["status_label"] for r in rows] == ["INVALID + FAILED", "PASSED", "INVALID"]
    assert rows[0]["output_tokens_per_s"].endswith(" (invalid)")
    assert not rows[1]["output_tokens_per_s"].endswith(")")
    assert rows[1]["recipe"].startswith("vllm · version 0.32.0 · 90% GPU memory")
    # soaktop report
    page = build_report(bad, plotly_js=STUB)
    assert "INVALID + FAILED: Invalid as a load measurement" in page
    assert f"{rec.load.output_tokens_per_s:,.4g} (invalid)" in page
    assert "not a valid measurement (INVALID + FAILED)" in page


# --- summary.csv and runs --csv --------------------------------------------------------


def test_summary_csv_keeps_its_columns_and_adds_at_the_end():
    assert SUMMARY_COLUMNS == (
        "run_id",
        "status",
        "requested_concurrency",
        "workers_started",
        "completed_requests",
        "load_failures",
        "elapsed_incl_drain_s",
        "output_tokens_per_s",
        "p99_ttft_s",
        "p99_e2e_s",
        "gates",
        "reasons",
        "status_label",
        "row",
        "cell",
        "e2e_median_s",
        "e2e_p50_nearest_s",
        "ttft_content_median_s",
        "input_tokens_mean",
        "output_tokens_mean",
    )
    assert (*SUMMARY_COLUMNS, "recipe", "path") == RUNS_CSV_COLUMNS
    rec = RunRecord.model_validate(_record(PASSED))
    rows = list(csv.DictReader(io.StringIO(summary_csv(rec).decode())))
    assert len(rows) == 1 and rows[0]["status_label"] == "PASSED" and rows[0]["row"] == "run"
    assert (
        rows[0]["output_tokens_per_s"] == f"{rec.load.output_tokens_per_s:.3f}" if rec.load else 0
    )


def _matrix(status: str, reasons: list[dict[str, str]]) -> RunRecord:
    cells = [
        {
            "index": i,
            "input_tokens_target": n,
            "concurrency": c,
            "prompt_pool_sha256": "ab",
            "completed": 12,
            "failed": 0,
            "e2e_median_s": 1.5 + i,
            "e2e_p50_nearest_s": 1.4 + i,
            "ttft_content_median_s": 0.2,
            "input_tokens_mean": float(n),
            "output_tokens_mean": 37.0,
        }
        for i, (n, c) in enumerate([(6000, 1), (6000, 4)])
    ]
    spec = {"input_tokens": [6000], "concurrency": [1, 4], "reps": 3, "requests": 4}
    return RunRecord.model_validate(
        {
            "run_id": "scout",
            "status": status,
            "reasons": reasons,
            "exit_code": 0,
            "config": {},
            "matrix": {"spec": spec, "max_tokens": 64, "cells": cells},
            "started_at": "",
            "ended_at": "",
        }
    )


@pytest.mark.parametrize("status", ["PASSED", "INVALID"])
def test_summary_csv_of_a_matrix_run_has_one_row_per_cell(status):
    reasons = [] if status == "PASSED" else [dict(THREADS), dict(GPU_FAULT)]
    rows = list(csv.DictReader(io.StringIO(summary_csv(_matrix(status, reasons)).decode())))
    assert [r["row"] for r in rows] == ["run", "cell", "cell"]
    assert [r["cell"] for r in rows] == ["", "~6000 / C1", "~6000 / C4"]
    label = "PASSED" if status == "PASSED" else "INVALID + FAILED"
    assert {(r["status"], r["status_label"]) for r in rows} == {(status, label)}
    flag = "" if status == "PASSED" else " (invalid)"
    assert [r["e2e_median_s"] for r in rows[1:]] == [f"1.500{flag}", f"2.500{flag}"]
    assert rows[2]["requested_concurrency"] == "4" and rows[2]["completed_requests"] == "12"
    assert rows[1]["output_tokens_mean"] == "37.000"  # a count, not flagged


def test_runs_csv_is_inert_and_written_atomically(tmp_path, capsys):
    folder = tmp_path / "runs"
    folder.mkdir()
    _run(PASSED, folder / "a", run_id='=HYPERLINK("x")\x1b]0;t\x07')
    out = tmp_path / "results.csv"
    out.write_text("old\n")
    assert _cli("runs", str(folder), "--csv", str(out)) == 0
    capsys.readouterr()
    text = out.read_text()
    assert "\x1b" not in text and not list(tmp_path.glob(".results.csv.tmp"))
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["run_id"].startswith("'=HYPERLINK")
    assert _cli("runs", str(folder), "--csv", "-") == 0
    assert capsys.readouterr().out == runs_csv([read_run(folder / "a")]).decode()
    assert _cli("runs", str(folder), "--csv", str(tmp_path / "no" / "such.csv")) == 2
    assert "cannot write" in capsys.readouterr().err
