"""``soaktop report`` and ``compare --html`` on records with a window series and an
endurance judgement (schema 1.2), built through the models (tests/report/endurance_runs.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from soak.after.compare import compare, read_run
from soak.after.report import build_report
from soak.after.report.charts import CHARTS
from soak.after.report.compare_page import build_compare_page
from soak.after.report.endurance import WINDOW_CHARTS
from soak.record.endurance import WindowFigures
from tests.report import endurance_runs as er
from tests.report.test_report import EVIL, FAILED, _chromium, _figures, rendered_charts

WIN_IDS = [c[0] for c in WINDOW_CHARTS]


def _rects(fig: dict[str, Any]) -> list[tuple[float, float]]:
    return [(s["x0"], s["x1"]) for s in fig["layout"]["shapes"] if s["type"] == "rect"]


def _row(page: str, first_cell: str) -> list[str]:
    """The cells of the table row whose first cell is ``first_cell`` (as escaped HTML)."""
    m = re.search(rf"<tr><td>{re.escape(first_cell)}</td>(.*?)</tr>", page)
    assert m, f"no row {first_cell!r}"
    return re.findall(r"<td>(.*?)</td>", m.group(1))


def test_the_window_series_is_charted_over_the_whole_run_with_baseline_and_end(tmp_path):
    run = er.write_run(tmp_path / "decay", er.decaying())
    figs = _figures(build_report(run, plotly_js=""))
    assert sorted(figs) == sorted(f"chart-{c}" for c in [*(c[0] for c in CHARTS), *WIN_IDS])
    windows = er.windows()
    thr = figs["chart-win_throughput"]
    tok = next(t for t in thr["data"] if t["name"] == "output tok/s")
    assert tok["y"] == [w.output_tok_s for w in windows]
    assert tok["y"][0] == 4210.0 and tok["y"][29] == 2905.0
    assert tok["x"][0] == pytest.approx(er.SERIES_START + 30)  # a window at its middle
    assert next(t for t in thr["data"] if t["name"] == "requests/s")["yaxis"] == "y2"
    assert thr["layout"]["title"]["text"] == "Throughput per 60 s window, whole run"
    assert thr["layout"]["xaxis"]["range"][1] == windows[-1].end_s  # the whole run
    # Baseline windows 0–4 and end windows 25–29 shaded, the partial and drain greyed,
    # the warm-up from the release to the series origin.
    start = er.SERIES_START
    assert _rects(thr) == [
        (start + 30 * 60, start + 32 * 60),
        (start, start + 5 * 60),
        (start + 25 * 60, start + 30 * 60),
        (er.RELEASE_S, start),
    ]
    labels = [a["text"] for a in thr["layout"]["annotations"]]
    assert {"baseline", "end", "warm-up"} <= set(labels)
    lat = figs["chart-win_latency"]
    p99 = next(t for t in lat["data"] if t["name"] == "TTFT p99")
    assert p99["y"][19] == 0.4 and p99["y"][29] == 2.08
    # TTFT p99's onset is marked on the latency chart (its words on hover), not elsewhere.
    lines = [s["x0"] for s in lat["layout"]["shapes"] if s["type"] == "line"]
    assert lines == [er.ONSET_S]
    hover = [a["hovertext"] for a in lat["layout"]["annotations"] if "hovertext" in a]
    assert hover == ["TTFT p99 +420% (0.4 s → 2.08 s), monotone since load+00:20:00"]
    assert not [s for s in figs["chart-win_memory"]["layout"]["shapes"] if s["type"] == "line"]
    kv = figs["chart-win_kv"]["data"][0]
    assert kv["y"][0] == 40.0 and kv["y"][10] == 41.0  # a ratio, in percent
    assert figs["chart-win_memory"]["data"][0]["y"][4] == 1014.0
    assert figs["chart-win_gpu"]["data"][0]["y"][0] == 70_000.0


def test_the_drift_and_leak_table_has_the_right_numbers(tmp_path):
    run = er.write_run(tmp_path / "decay", er.decaying())
    page = build_report(run, plotly_js="")
    assert "<h2>Drift and leaks</h2>" in page and '<a href="#endurance">' in page
    assert "judged on 30 windows of 60 s: baseline windows 0–4, end windows 25–29" in page
    assert "warm-up 60s: 412 requests, ended load+00:00:59 (not judged)" in page
    assert (
        "policy (default): drift.output_tok_s&gt;-10%, drift.ttft.p99&lt;+50%, "
        "leak.server_rss&lt;200MB/h" in page
    )
    assert _row(page, "throughput") == [
        "4,210 tok/s → 2,905 tok/s",
        "−31 %",
        "falling −650 tok/s [−700, −600], p&lt;0.001",
        "load+00:00:59",
        "drift",
    ]
    assert _row(page, "TTFT p99") == [
        "0.4 s → 2.08 s",
        "+420 %",
        "rising +3.40 s [2.90, 3.90], p&lt;0.001",
        "load+00:20:00 (fault: engine restart)",
        "drift",
    ]
    assert _row(page, "E2E p99")[-1] == "stable"
    assert _row(page, "failure rate")[:2] == ["0.1 % → 2.6 %", "+2.5 pts"]  # points
    assert _row(page, "server RSS") == [
        "1,007 MB → 1,094 MB",
        "+212 MB/h [180, 240], p&lt;0.001",
        "leak",
    ]
    assert _row(page, "GPU memory")[-1] == "stable (came back after its peak)"
    # Drift rows come first; the findings' own words are listed above the table.
    assert page.index("<td>TTFT p99</td>") < page.index("<td>E2E p99</td>")
    assert "<li>server RSS +212 MB/h (1,007 MB → 1,095 MB), never came back</li>" in page
    assert "no values for: open files; no leak rate for: open files" in page


def test_a_run_too_short_to_judge_says_so_instead_of_stable(tmp_path):
    run = er.write_run(tmp_path / "short", er.short(), er.windows(4))
    page = build_report(run, plotly_js="")
    assert "not judged: 4 windows of 60 s; a trend needs 6" in page
    assert "<h3>Drift: first → last</h3>" not in page and ">stable<" not in page
    assert "chart-win_throughput" in _figures(page)  # the 4 windows are still charted


def test_an_older_record_and_a_demo_shorter_than_a_window(tmp_path):
    page = build_report(FAILED, plotly_js="")  # schema 1.1: no windows, no endurance
    assert "the record predates the window series (soaktop schema 1.2)" in page
    assert not [k for k in _figures(page) if k.startswith("chart-win_")]
    # A 1.2 record whose load never filled a window: one partial window, nothing judged.
    partial = [w for w in er.windows(0) if w.kind == "partial"]
    run = er.write_run(tmp_path / "tiny", er.short(), partial)
    page = build_report(run, plotly_js="")
    assert "no whole load window: nothing to chart" in page
    assert not [k for k in _figures(page) if k.startswith("chart-win_")]


def test_without_windows_in_the_record_the_live_lines_are_charted(tmp_path):
    run = er.write_run(tmp_path / "crashed", None, [])
    with (run / "windows.jsonl").open("w") as fh:
        for w in er.windows(8):
            line = WindowFigures.model_validate(w.model_dump() | {"source": "live"})
            line.schema_version = "1.1"
            fh.write(line.model_dump_json() + "\n")
        fh.write('{"i": 10, "start_s": 5')  # torn: the writer died mid-line
    page = build_report(run, plotly_js="")
    assert "10 windows from windows.jsonl (the live lines, 1 % histogram buckets)" in page
    tok = _figures(page)["chart-win_throughput"]["data"][0]
    assert len(tok["y"]) == 10 and tok["y"][0] == 4210.0


def test_words_from_the_run_are_escaped(tmp_path):
    e = er.decaying()
    e.drift[1].words = f"TTFT p99 +420% since {EVIL}"
    e.drift[1].since_event = f"fault: {EVIL}"
    page = build_report(er.write_run(tmp_path / "evil", e), plotly_js="")
    assert "<script>alert(" not in page and page.count("</script>") == 3
    assert "fault: &lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    notes = _figures(page)["chart-win_latency"]["layout"]["annotations"]
    assert any("&lt;script&gt;" in a.get("hovertext", "") for a in notes)


def test_compare_page_shows_each_runs_drift_and_leak_table(tmp_path):
    runs = [
        er.write_run(tmp_path / "decay", er.decaying()),
        er.write_run(tmp_path / "short", er.short(), er.windows(4)),
        FAILED,
    ]
    views = [read_run(p) for p in runs]
    page = build_compare_page(compare(views), plotly_js="")
    assert '<section id="endurance"><h2>Drift and leaks</h2>' in page
    assert page.index('id="table"') < page.index('id="endurance"') < page.index('id="charts"')
    assert _row(page, "throughput")[1] == "−31 %"
    assert "not judged: 4 windows of 60 s; a trend needs 6" in page
    assert "not judged: the record predates the window series (soaktop schema 1.2)" in page
    assert "<th>Drift first → last</th>" in page
    assert "throughput −31 %, TTFT p99 +420 %, server RSS +212 MB/h" in page
    # Two records from before the timeline: the page is as it was.
    old = build_compare_page(compare([read_run(FAILED), read_run(FAILED)]), plotly_js="")
    assert "Drift" not in old


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed")
def test_chromium_draws_the_window_charts(tmp_path):
    binary = _chromium()
    assert binary is not None
    page = tmp_path / "report.html"
    page.write_text(build_report(er.write_run(tmp_path / "decay", er.decaying())))
    n_charts = len(_figures(page.read_text()))
    assert n_charts == len(CHARTS) + len(WIN_IDS)
    parts = rendered_charts(binary, tmp_path / "profile", page.as_uri(), n_charts)
    drawn = {p.split('"', 1)[0]: p for p in parts}
    for cid in WIN_IDS:
        assert re.search(r'<path class="js-line"[^>]* d="M[^"]+', drawn[cid]), cid


def test_the_fixture_record_carries_the_timeline_through_json(tmp_path):
    """What the builder writes is a record this soaktop reads back without a problem."""
    run = er.write_run(tmp_path / "decay", er.decaying())
    view = read_run(run)
    assert view.problems == [] and view.record is not None
    assert view.record.endurance is not None and len(view.record.windows) == 32
    raw = json.loads(Path(run / "record.json").read_text())
    assert raw["endurance"]["drift"][0]["figure"] == "output_tok_s"


def test_a_long_series_is_thinned_and_keeps_its_spike():
    from soak.after.report.endurance import window_charts
    from soak.after.report.series import MAX_POINTS

    series = er.windows(5000, decay=False)
    series[2500].ttft_p99 = 9.0
    charts = {cid: fig for cid, _, fig, _ in window_charts(series, er.decaying())}
    p99 = charts["win_latency"]
    assert p99 is not None
    ys = p99["data"][0]["y"]
    assert len(ys) <= MAX_POINTS and 9.0 in ys


def test_rates_are_written_in_the_grammars_units():
    from soak.after.endurance_table import leak_rate
    from soak.record.endurance import LeakFinding

    kv = LeakFinding(resource="kv_usage", unit="/h", rate_per_h=0.3, mk_p=0.01)
    files = LeakFinding(resource="open_files", unit="/h", rate_per_h=120.0)
    rss = LeakFinding(
        resource="server_rss", unit="MB/h", rate_per_h=-5.0, rate_lo_per_h=-9.0, rate_hi_per_h=-1.0
    )
    assert leak_rate(kv) == "+30.0%/h, p=0.01"  # KV usage: percent of the cache per hour
    assert leak_rate(files) == "+120/h"
    assert leak_rate(rss) == "−5.00 MB/h [−9.00, −1.00]"
    assert leak_rate(rss, full=False) == "−5.00 MB/h"
