"""Lost telemetry in the monitor (issue 12 §3): the header, pane 4, pane 6, maximised pane 1.

The ``telemetry-lost`` fixture is a real run (see ``fixtures/trim.py``): the hostile server
answered ``/metrics`` with a 404 for the whole load, the DCGM exporter (the same 404) too,
``--require-telemetry engine`` at a 0.5 s interval — so the live snapshots from the third
on carry a failed ``telemetry_lost`` reason for the engine and a note for DCGM.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from textual.content import Content

from soak.judge.coverage import coverage_reasons
from tests.tui.helpers import FIXTURES, XID, LiveRun, live_app, screen_text, snapshot_of
from tui.coverage import lost_so_far
from tui.glyphs import ASCII
from tui.panes import ConcurrencyPane, GpuPane, HeaderPane
from tui.reader import RunMeta
from tui.runview import RunView

LOST = FIXTURES / "telemetry-lost"
JUDGED = 1
"""The fixture's second snapshot (load 00:04 of 00:08): the first with the reasons."""


def styles_at(content: Content, needle: str) -> list[str]:
    """The styles of the spans that cover the first character of ``needle``."""
    at = content.plain.index(needle)
    return [str(s.style) for s in content.spans if s.start <= at < s.end]


async def test_a_lost_engine_and_dcgm_exporter_are_said_in_every_pane(tmp_path: Path) -> None:
    run = LiveRun(LOST, tmp_path / "run")
    snap = run.write_until(JUDGED)
    assert [r["effect"] for r in snap["reasons"]] == ["failed", "note"]  # the fixture's point
    dcgm = snap["telemetry"]["coverage"]["dcgm"]["exporter 0"]
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        header = app.screen.query_one(HeaderPane)
        assert "verdict running │ engine /metrics e0 lost, DCGM exporter 0 lost" in (
            header.plain_text
        )
        assert "no failures so far" not in header.plain_text
        drawn = header.render()
        assert "$text-error" in " ".join(styles_at(drawn, "engine /metrics e0 lost"))
        assert "$text-warning" in " ".join(styles_at(drawn, "DCGM exporter 0 lost"))
        pane4 = app.screen.query_one(ConcurrencyPane).plain_text.splitlines()
        assert pane4[1] == "e0 metrics LOST (HTTP 404)"  # not the bare "scrape failed"
        gpus = app.screen.query_one(GpuPane).plain_text
        assert gpus == f"DCGM exporter 0 LOST: 0/{dcgm['expected']} (HTTP 404)"
        assert "no GPU source" not in screen_text(app)  # there is one, and it is lost

        await pilot.press("1")  # the header maximised: every source's coverage
        await pilot.pause()
        table = [
            " ".join(r.split()) for r in app.screen.query_one(HeaderPane).plain_text.splitlines()
        ]
        n = dcgm["expected"]
        assert f"engine /metrics e0 0/{n} 0% LOST HTTP 404" in table
        assert f"DCGM exporter 0 0/{n} 0% LOST HTTP 404" in table
        assert f"/health e0 {n}/{n} 100%" in table
        assert any(r.startswith("host sampling ") and r.endswith(" 100%") for r in table)


async def test_nothing_is_said_before_a_source_is_judged(tmp_path: Path) -> None:
    # The first snapshot: 4 samples expected (judged from 5), none answered, not lost yet.
    run = LiveRun(LOST, tmp_path / "run")
    snap = run.write_until(0)
    assert snap["telemetry"]["coverage"]["engine_metrics"]["endpoint 0"]["lost"] is False
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        assert "LOST" not in screen_text(app) and " lost" not in screen_text(app)
        assert "no failures so far" in app.screen.query_one(HeaderPane).plain_text


def _with_losses(snap: dict[str, Any]) -> dict[str, Any]:
    """An Xid-run snapshot whose endpoint 1 /health and DCGM exporter 1 were lost (the
    coverage entries as the runner writes them, the reasons from ``soak.judge.coverage``)."""
    snap = copy.deepcopy(snap)
    ok = {"answered": 14, "expected": 14, "share": 1.0, "lost": False, "why": None}
    hung: dict[str, Any] = {"answered": 3, "expected": 14, "share": 0.214, "lost": True}
    hung |= {"why": "timed out after 0.8 s", "failures": {"timed out after 0.8 s": 11}}
    cov = {
        "engine_metrics": {"endpoint 0": ok, "endpoint 1": ok},
        "health": {"endpoint 0": ok, "endpoint 1": hung},
        "dcgm": {"exporter 0": ok, "exporter 1": hung},
        "host": {"host": ok},
    }
    snap["telemetry"]["coverage"] = cov
    snap["reasons"] = [r.model_dump() for r in coverage_reasons({"coverage": cov}, ["gpu"])]
    return snap


async def test_losses_beside_live_numbers_fit_80x24(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    run.snaps[12] = _with_losses(run.snaps[12])
    run.write_until(12)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        header = app.screen.query_one(HeaderPane).plain_text.splitlines()
        assert header[2].startswith("verdict running │ 1 fault (3 reports), /health e1 lost, DCGM")
        pane4 = app.screen.query_one(ConcurrencyPane)
        rows = pane4.plain_text.splitlines()
        assert rows[1].startswith("e0 ok run  16 wait   0 KV")  # a healthy replica as before
        assert rows[2].startswith("e1 run 15 wait 0 KV") and rows[2].endswith(" health LOST")
        assert all(len(r) <= pane4.content_size.width for r in rows)
        pane6 = app.screen.query_one(GpuPane)
        gpus = pane6.plain_text.splitlines()
        assert gpus[0] == "DCGM exporter 1 LOST: 3/14 (timed out …"  # cut to the pane
        assert all(len(r) <= pane6.content_size.width for r in gpus)
        assert gpus[1].startswith("8 GPUs, 2 hosts 1 need a look")  # the GPUs still shown
        assert len(gpus) == pane6.content_size.height
        screen = screen_text(app).splitlines()
        assert len(screen) == 24 and all(len(r) <= 80 for r in screen)

        await pilot.press("4")  # maximised: room for the why, and the full numbers
        await pilot.pause()
        rows = app.screen.query_one(ConcurrencyPane).plain_text.splitlines()
        assert rows[2].startswith("e1 ok run  15 wait   0 KV")
        assert rows[2].endswith(" health LOST (timed out after 0.8 s)")


def _judged(cov: dict[str, Any], required: list[str]) -> RunView:
    """A running snapshot with this coverage and the reasons the runner gives it (and the
    run's --require-telemetry kinds in its config)."""
    telemetry = {"coverage": cov, "gpu_sources": []}
    reasons = [r.model_dump() for r in coverage_reasons(telemetry, required)]
    snap = snapshot_of({"status": "running", "telemetry": {"coverage": cov}, "reasons": reasons})
    meta = RunMeta(run_dir=Path("r"), required_telemetry=tuple(required))
    return RunView(mode="live", snapshot=snap, meta=meta)


def test_header_labels_follow_the_runners_reasons() -> None:
    # The sources soak.judge.coverage judged lost, in its words for them.
    lost = {"answered": 0, "expected": 8, "share": 0.0, "lost": True, "why": "HTTP 404"}
    cov = {"engine_metrics": {"endpoint 2": lost}, "nvml": {"local GPUs": lost}}
    view = _judged(cov, ["engine"])
    assert [(x.label, x.failed) for x in lost_so_far(view)] == [
        ("engine /metrics e2", True),
        ("NVML local GPUs", False),
    ]
    # A lost host sampler, and a required GPU kind with no GPU source at all.
    labels = [(x.label, x.failed) for x in lost_so_far(_judged({"host": {"host": lost}}, ["gpu"]))]
    assert labels == [("host sampling", False), ("GPU telemetry", True)]


def test_a_long_loss_is_cut_with_the_glyph_sets_ellipsis() -> None:
    lost = {"answered": 0, "expected": 8, "share": 0.0, "lost": True, "why": "HTTP 404"}
    cov = {"dcgm": {f"exporter {i}": lost for i in range(3)}}
    snap = {
        "status": "running",
        "phase": "load",
        "telemetry": {"coverage": cov},
        "reasons": [r.model_dump() for r in coverage_reasons({"coverage": cov})],
    }
    view = RunView(
        mode="live", snapshot=snapshot_of(snap), meta=RunMeta(run_dir=Path("r")), glyphs=ASCII
    )
    verdict = HeaderPane().build(view, 60, 3).plain.splitlines()[2]
    assert len(verdict) == 60 and verdict.endswith("...")
    assert verdict.startswith("verdict running | DCGM exporter 0 lost, DCGM exporter 1")
    gpus = GpuPane().build(view, 30, 2).plain.splitlines()
    assert gpus == ["DCGM exporter 0 LOST: 0/8 (...", "DCGM exporter 1 LOST: 0/8 (..."]
