"""The soak seen live and afterwards: windows.jsonl read and bounded, and each figure's
drift, the whole-run chart, the leak rates and the header badge where the operator looks.

The run directory is written through the runner's models (``tests/tui/endurance_run.py``);
nothing here computes a statistic the runner did not write.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from tests.tui.endurance_run import (
    JUDGED_AT,
    TOO_FEW_AT,
    WARMUP_AT,
    WINDOWS,
    window_line,
    write_run,
    write_windows,
)
from tests.tui.helpers import HEALTHY, live_app, screen_text, view_app
from tui.fmt import change, signed
from tui.glyphs import ASCII, UNICODE
from tui.panes import ConcurrencyPane, GpuPane, HeaderPane, LatencyPane, ThroughputPane
from tui.panes.endurance import leak_rate
from tui.reader import RunFollower, load_replay
from tui.settings import UiSettings
from tui.windows import TrendPoint, TrendSeries, columns, read_window, trend_point


def _point(i: int, tok: float | None = 100.0) -> TrendPoint:
    return TrendPoint(i, i, i * 60.0, i * 60.0 + 60, tok, None, 0.5)


# --- the reader ------------------------------------------------------------------------


def test_follower_reads_appended_windows_and_waits_for_a_torn_last_line(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    follower = RunFollower(run_dir)
    assert not follower.poll().windows and not follower.windows  # no file yet
    write_windows(run_dir, range(3))
    assert [p.first for p in follower.poll().windows] == [0, 1, 2]
    torn = window_line(3)
    with (run_dir / "windows.jsonl").open("a") as fh:
        fh.write(torn[:25])  # the runner is mid-write
    assert follower.poll().windows == ()
    with (run_dir / "windows.jsonl").open("a") as fh:
        fh.write(torn[25:] + "not a window\n" + window_line(4, "drain"))
    update = follower.poll()
    assert [p.first for p in update.windows] == [3]  # the drain window is not charted
    assert update.skipped == 1  # the unreadable line, counted
    assert [p.first for p in follower.windows] == [0, 1, 2, 3]


def test_replay_reads_every_window_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run")
    with (run_dir / "windows.jsonl").open("a") as fh:
        fh.write(window_line(WINDOWS + 1)[:30])
    replay = load_replay(run_dir)
    assert len(replay.windows) == WINDOWS  # the drain window and the torn line left out
    assert replay.windows[0].output_tok_s == pytest.approx(4252.1)
    assert replay.skipped == 0


def test_a_run_without_windows_reads_as_before(tmp_path: Path) -> None:
    assert load_replay(HEALTHY).windows == ()
    run_dir = tmp_path / "old"
    shutil.copytree(HEALTHY, run_dir)
    follower = RunFollower(run_dir)
    assert follower.poll().windows == () and follower.windows == ()


def test_a_window_line_reads_through_its_model() -> None:
    w = read_window(window_line(7).encode())
    assert w is not None and w.i == 7 and w.schema_version == "1.2"
    assert trend_point(w) is not None
    drain = read_window(window_line(8, "drain").encode())
    assert drain is not None and trend_point(drain) is None
    assert read_window(b'{"i": "seven"}') is None  # never placed at an invented 0
    odd = read_window(b'{"i": 3, "start_s": 0, "end_s": 60, "ttft_p99": "x", "req_s": 2}')
    assert odd is not None and odd.ttft_p99 is None and odd.req_s == 2  # the rest kept


def test_the_live_series_stays_bounded_and_spans_the_whole_run() -> None:
    series = TrendSeries(cap=100)
    for i in range(5000):
        series.add(_point(i, 100.0 if i % 2 else None))
    points = series.points
    assert len(points) <= 100 and series.stride == 64
    assert points[0].first == 0 and points[-1].last == 4999  # nothing lost off the ends
    assert all(b.first == a.last + 1 for a, b in itertools.pairwise(points))
    assert {p.output_tok_s for p in points} == {100.0}  # gaps are not zeros


def test_columns_fit_the_series_to_the_width() -> None:
    points = [_point(i, float(i)) for i in range(10)]
    assert columns(points, "output_tok_s", 20) == [float(i) for i in range(10)]
    assert columns(points, "output_tok_s", 5) == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert columns(points, "req_s", 5) == [None] * 5
    assert columns([], "output_tok_s", 5) == []


def test_changes_and_rates_in_few_characters() -> None:
    assert change(-0.31, UNICODE) == "▼31%"
    assert change(4.2, UNICODE) == "▲420%"
    assert change(42.0, UNICODE) == "▲43×"
    assert change(0.021, ASCII) == "+2.1%"
    assert change(None, UNICODE) == "—"
    assert signed(-0.52, ASCII) == "-0.5" and signed(1234, ASCII) == "+1.2k"


def test_leak_rates_in_their_units() -> None:
    from tests.tui.endurance_run import _leak

    assert leak_rate(_leak("gpu_mem", 2048.0, "MiB/h", "ok"), UNICODE) == "+2.0GiB"
    assert leak_rate(_leak("server_rss", 90.0, "MB/h", "ok"), UNICODE) == "+90MB"
    assert leak_rate(_leak("kv_usage", 0.03, "/h", "ok"), UNICODE) == "+3.0%"
    assert leak_rate(_leak("kv_usage", 3.0, "%/h", "ok"), UNICODE) == "+3.0%"
    assert leak_rate(_leak("client_rss", None, "MB/h", "no_data"), UNICODE) == "—"


# --- the screen ------------------------------------------------------------------------


async def test_the_judged_soak_shows_drift_chart_leaks_and_badge(tmp_path: Path) -> None:
    app = view_app(write_run(tmp_path / "run"))
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(JUDGED_AT)
        await pilot.pause()
        screen = app.screen
        header = screen.query_one(HeaderPane).plain_text
        assert "DRIFT+LEAK BREACHED" in header and "throughput -31%" in header
        tput = screen.query_one(ThroughputPane).plain_text.splitlines()
        assert tput[0].endswith("▼31%") and tput[2].endswith("▼31%")
        assert tput[4] == "whole run 2:00:00, 120 windows"
        assert tput[1][0] == "█" and tput[1][-1] == "▆"  # fell by a third, whole run
        latency = screen.query_one(LatencyPane).plain_text.splitlines()
        assert latency[0].rstrip().endswith("drift")
        assert latency[1].rstrip().endswith("▲900%") and latency[2].rstrip().endswith("▲30%")
        assert latency[5].startswith("TTFT p99 ▂") and latency[5].endswith("█")
        leaks = screen.query_one(ConcurrencyPane).plain_text.splitlines()[-1]
        assert leaks == "leak/h srv +90MB cli +1.8MB KV +0.4%"
        assert screen.query_one(GpuPane).plain_text.splitlines()[0] == "leak/h GPU mem +510MiB"
        assert all(len(row) <= 80 for row in screen_text(app).splitlines())


async def test_before_the_judgement_the_badge_says_why(tmp_path: Path) -> None:
    app = view_app(write_run(tmp_path / "run"))
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(WARMUP_AT)
        await pilot.pause()
        header = app.screen.query_one(HeaderPane)
        assert "endurance n/a (warm-up 00:30 left)" in header.plain_text
        assert "whole run" not in app.screen.query_one(ThroughputPane).plain_text
        app.move_cursor(TOO_FEW_AT)
        await pilot.pause()
        assert "endurance n/a (too few windows: 4 of 10)" in header.plain_text
        # the chart holds only the windows closed by this snapshot
        assert "whole run 04:00, 4 windows" in app.screen.query_one(ThroughputPane).plain_text


async def test_a_run_without_endurance_shows_no_drift_column(tmp_path: Path) -> None:
    app = view_app(HEALTHY)
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(7)
        await pilot.pause()
        assert "drift" not in app.screen.query_one(LatencyPane).plain_text
        assert "endurance" not in app.screen.query_one(HeaderPane).plain_text
        assert "leak" not in screen_text(app)


async def test_the_maximised_header_lists_every_figure_and_leak(tmp_path: Path) -> None:
    app = view_app(write_run(tmp_path / "run"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("1")
        text = app.screen.query_one(HeaderPane).plain_text
        assert "endurance 120 windows of 60 s, judged" in text
        assert "throughput             4210 →     2905  ▼31% breached" in text
        assert "leak server RSS       +90MB/h breached" in text


async def test_live_windows_reach_the_chart_as_they_close(tmp_path: Path) -> None:
    source = write_run(tmp_path / "source")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("config.json", "identity.json", "events.jsonl"):
        shutil.copyfile(source / name, run_dir / name)
    snaps = (source / "snapshots.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "snapshots.jsonl").write_text("".join(snaps[: TOO_FEW_AT + 1]))
    write_windows(run_dir, range(4))
    app = live_app(run_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        tput = app.screen.query_one(ThroughputPane)
        assert "whole run 04:00, 4 windows" in tput.plain_text
        with (run_dir / "snapshots.jsonl").open("a") as fh:
            fh.write(snaps[JUDGED_AT])
        write_windows(run_dir, range(4, WINDOWS), mode="a")
        await app.poll_now()
        await pilot.pause()
        assert "whole run 2:00:00, 120 windows" in tput.plain_text
        assert "DRIFT+LEAK BREACHED" in app.screen.query_one(HeaderPane).plain_text


async def test_ascii_and_no_color_keep_the_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = view_app(write_run(tmp_path / "run"), settings=UiSettings(ascii=True))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert text.isascii(), sorted({c for c in text if not c.isascii()})
        assert "BREACHED" in text and "-31%" in text and "+900%" in text


def test_the_fixture_lines_are_the_models_own(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run")
    first = json.loads((run_dir / "windows.jsonl").read_text().splitlines()[0])
    assert first["schema_version"] == "1.2" and first["kind"] == "load"
    snap = json.loads((run_dir / "snapshots.jsonl").read_text().splitlines()[-1])
    assert snap["endurance"]["badge"] == "breached"
