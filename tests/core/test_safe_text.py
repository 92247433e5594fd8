"""The one sanitiser for text that came from outside (issue 12 §1), and its boundaries.

Unit level: every character class it must escape and every one it must keep; then each
place soaktop shows or exports server text — the monitor's line builder and event
details, the headless lines, ``compare``/``runs``/``decide`` text, ``summary.csv`` and the
HTML escaping — given hostile text, shows it escaped and emits no control.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from soak.safe_text import safe_csv_cell, safe_json, safe_line, safe_text
from tests.hostile_server import ESC_CLEAR, ESC_TITLE, HOSTILE

if TYPE_CHECKING:  # for an annotation only: each test imports what it reaches itself
    from soak.after.compare import RunView as CompareView

C0_KEPT = {"\n", "\t"}
C0 = [chr(c) for c in range(0x20)]
C1 = [chr(c) for c in range(0x80, 0xA0)]
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
INVISIBLE = ["\u200b", "\u200e", "\u200f", "\u061c", "\ufeff", "\u2028", "\u2029", "\U000e0041"]


def controls(s: str) -> list[str]:
    """What a terminal could act on: C0 (bar newline and tab), DEL, C1, bidi, invisibles."""
    bad = set(C0) - C0_KEPT | {"\x7f"} | set(C1) | set(BIDI) | set(INVISIBLE)
    return [f"U+{ord(c):04X}" for c in s if c in bad]


# --- the sanitiser ------------------------------------------------------------------


@pytest.mark.parametrize("ch", [c for c in C0 if c not in C0_KEPT] + ["\x7f"])
def test_every_c0_control_and_del_is_shown_as_a_hex_escape(ch: str) -> None:
    out = safe_text(f"a{ch}b")
    esc = {"\r": "\\r"}.get(ch, f"\\x{ord(ch):02x}")
    assert out == f"a{esc}b"
    assert ch not in out and safe_line(f"a{ch}b") == out


@pytest.mark.parametrize("ch", C1)
def test_every_c1_control_is_shown_as_a_hex_escape(ch: str) -> None:
    assert safe_text(ch) == f"\\x{ord(ch):02x}"
    assert safe_line(ch) == f"\\x{ord(ch):02x}"


@pytest.mark.parametrize("ch", BIDI + INVISIBLE)
def test_bidi_overrides_and_invisibles_are_shown(ch: str) -> None:
    out = safe_text(f"abc{ch}def")
    assert ch not in out
    expect = f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
    assert out == f"abc{expect}def"


def test_a_lone_surrogate_is_shown_so_the_text_can_be_encoded() -> None:
    out = safe_line("x\ud800y")
    assert out == "x\\ud800y"
    out.encode("utf-8")  # would raise with the surrogate left in


def test_the_hostile_escapes_read_as_text() -> None:
    assert safe_text(ESC_TITLE) == "\\x1b]0;PWNED-TITLE\\x07"
    assert safe_text(ESC_CLEAR) == "\\x1b[2J"
    out = safe_line(HOSTILE)
    assert out == "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J\\x9b31m=HYPERLINK(1)\\x07"
    assert not controls(out)


def test_multi_line_text_keeps_newline_and_tab_one_line_shows_them() -> None:
    s = "first\tcol\nsecond\r\n"
    assert safe_text(s) == "first\tcol\nsecond\\r\n"
    assert safe_line(s) == "first\\tcol\\nsecond\\r\\n"


def test_ordinary_text_is_returned_unchanged() -> None:
    for s in ("", "plain", "GPU 1 · 16% ██░░ ±3 °C — ok", "naïve 日本語 ✓", "[bold]x[/bold]"):
        assert safe_text(s) == s and safe_line(s) == s
    s = "no escapes here at all"
    assert safe_line(s) is s  # the fast path: no copy


def test_non_strings_are_shown_as_their_str() -> None:
    assert safe_line(3) == "3" and safe_text(None) == "None"
    assert safe_line(Path("/a\x1bb")) == "/a\\x1bb"


def test_markup_stays_literal_text() -> None:
    # Escaping never adds or removes brackets: Rich/Textual markup is the caller's to
    # keep literal (Content), and a server's "[b]" is still "[b]" after it.
    assert safe_line("[red]x[/red] [link=http://e]y[/link]") == (
        "[red]x[/red] [link=http://e]y[/link]"
    )


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("=HYPERLINK(1)", "'=HYPERLINK(1)"),
        ("+1+A1", "'+1+A1"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("\t=1", "\\t=1"),  # shown as text, and then no longer a formula
        ("ok", "ok"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(cell: str, expected: str) -> None:
    assert safe_csv_cell(cell) == expected


@pytest.mark.parametrize("number", ["-12.5", "-3", "+4", "-0.001", "-1e-05", "-.5", "12"])
def test_csv_numbers_are_kept(number: str) -> None:
    assert safe_csv_cell(number) == number
    assert safe_csv_cell(float(number)) == str(float(number))


def test_csv_numbers_soaktop_wrote_pass_unchanged() -> None:
    assert safe_csv_cell(-7) == "-7" and safe_csv_cell(2.5) == "2.5"
    assert safe_csv_cell(True) == "True"  # a bool is no number here


def test_csv_cell_escapes_controls_too() -> None:
    assert safe_csv_cell(HOSTILE) == safe_line(HOSTILE)
    assert safe_csv_cell("=" + ESC_CLEAR) == "'=\\x1b[2J"


def test_json_for_a_terminal_parses_to_exactly_the_same_value() -> None:
    value = {"model": "m" + HOSTILE, "bidi": "a\u202eb", "tag": "\U000e0041", "n": [1, -2]}
    for text in (json.dumps(value, ensure_ascii=False), json.dumps(value, indent=2)):
        out = safe_json(text)
        assert not controls(out.replace("\n", ""))
        assert json.loads(out) == value
    assert "\\u009b" in safe_json(json.dumps(value, ensure_ascii=False))


def test_large_clean_text_is_fast() -> None:
    import time

    clean = "GPU 0 ok " * 200_000
    dirty = clean + "\x1b"
    t0 = time.perf_counter()
    for _ in range(10):
        safe_line(clean)
    clean_s = time.perf_counter() - t0
    assert safe_line(dirty).endswith("\\x1b")
    assert clean_s < 1.0  # 18 MB checked in well under a second (str.isprintable)


# --- the boundaries -------------------------------------------------------------------


def test_monitor_lines_show_escapes_and_keep_markup_literal() -> None:
    from tui.panes.base import line

    c = line("a ", (HOSTILE, "bold"), " [b]not bold[/b]")
    assert not controls(c.plain)
    assert "\\x1b]0;PWNED-TITLE" in c.plain
    assert c.plain.endswith("[b]not bold[/b]")


def test_event_detail_shows_escapes_from_message_data_and_evidence(tmp_path: Path) -> None:
    from soak.record.events import Event
    from soak.record.snapshot import Snapshot
    from tui.glyphs import UNICODE
    from tui.panes.events import EventRow, failure_summary, row_content
    from tui.reader import EventEntry
    from tui.runview import RunView
    from tui.screens.event_detail import detail_text

    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "e.json").write_text(
        json.dumps({"answer": HOSTILE}, ensure_ascii=False), encoding="utf-8"
    )
    (tmp_path / "evidence" / "log.txt").write_text(f"line {HOSTILE}\nnext\n", encoding="utf-8")
    for name in ("evidence/e.json", "evidence/log.txt"):
        e = EventEntry.of(
            0,
            Event(
                t=1.0,
                wall="",
                kind="failure",
                severity="error",
                message="HTTP 500: " + HOSTILE,
                data={"class": "http_5xx", "detail": HOSTILE, "evidence": name},
            ),
        )
        row = EventRow(key="ev-0", events=(e,))
        text = detail_text(row, tmp_path)
        assert not controls(text)
        assert "HTTP 500: \\x1b]0;PWNED-TITLE\\x07\\x1b[2J\\x9b31m" in text
        assert "\n" in text  # still multi-line
        listed = row_content(row, UNICODE).plain
        assert not controls(listed) and "\\x1b" in listed
    snap = Snapshot.model_validate(
        {
            **{"seq": 0, "t": 3.0, "wall": "", "run_id": "r", "phase": "load", "client": {}},
            "phase_elapsed_s": 0.0,
            "load": {"requested_concurrency": 1, "failures_by_class": {HOSTILE: 3}},
        }
    )
    assert not controls(failure_summary(RunView(mode="view", snapshot=snap)))


def test_headless_lines_show_escapes(tmp_path: Path) -> None:
    from soak.cli.headless import event_line, final_report, status_line
    from soak.record.events import Event
    from soak.record.models import Reason, RunRecord, Status
    from soak.record.sections import ThresholdState
    from soak.record.snapshot import Snapshot

    ev = {"wall": "2026-01-01T00:00:03.000", "kind": "fault", "message": HOSTILE + "\nnext"}
    out = event_line(Event.model_validate({"t": 3.0, **ev}))
    assert not controls(out) and "\n" not in out and "\\x1b]0;" in out
    snap = {
        "seq": 0,
        "t": 3.0,
        "wall": "",
        "run_id": "r",
        "phase": "load" + HOSTILE,
        "phase_elapsed_s": 0.0,
        "client": {},
        "load": {
            "failures_by_class": {HOSTILE: 2},
            "completed": 1,
            "in_flight": 0,
            "workers_started": 1,
            "requested_concurrency": 1,
        },
    }
    assert not controls(status_line(Snapshot.model_validate(snap)))
    rec = RunRecord(
        run_id="r" + HOSTILE,
        status=Status.FAILED,
        reasons=[Reason(code="x", effect="failed", message="fault: " + HOSTILE + "\nline 2")],
        exit_code=1,
        config={},
        thresholds=[
            ThresholdState(
                expr="ttft.p99<1s",
                condition=HOSTILE,
                metric="ttft.p99",
                state="ok",
                observed=1,
                limit=1.0,
                source="record (exact, nearest-rank)",
            )
        ],
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
    )
    report = final_report(rec, tmp_path)
    assert not controls(report.replace("\n", ""))
    assert "- [failed] fault: \\x1b]0;PWNED-TITLE" in report
    assert "\\nline 2" in report  # a reason's newline never starts a line of its own


def test_summary_csv_is_inert_and_quotes_formulas() -> None:
    from soak.record.models import Reason, RunRecord, Status
    from soak.record.summary_csv import summary_csv

    rec = RunRecord(
        run_id="=cmd|' /C calc'!A0",
        status=Status.FAILED,
        reasons=[Reason(code="x", effect="failed", message="=HYPERLINK(1) " + HOSTILE)],
        exit_code=1,
        config={},
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
    )
    text = summary_csv(rec).decode()
    assert not controls(text.replace("\n", ""))
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["run_id"] == "'=cmd|' /C calc'!A0"
    assert row["reasons"].startswith("'=HYPERLINK(1) \\x1b]0;PWNED-TITLE")
    assert row["status"] == "FAILED"


def _view(tmp_path: Path, run_id: str, reason: str) -> CompareView:
    from soak.after.compare import RunView
    from soak.record.models import RunRecord

    rec = {
        "run_id": run_id,
        "status": "FAILED",
        "reasons": [{"code": "x", "effect": "failed", "message": reason}],
        "config": {"model": "m" + HOSTILE},
        "exit_code": 1,
        "started_at": "",
        "ended_at": "",
    }
    record = RunRecord.model_validate(rec)
    return RunView(path=tmp_path, run_id=run_id, status="FAILED", record=record)


def test_compare_and_runs_text_show_escapes(tmp_path: Path) -> None:
    from soak.after.compare import compare, render_markdown, render_runs, render_text

    views = [_view(tmp_path, "run" + HOSTILE, "HTTP 500: " + HOSTILE + "\nmore")]
    for out in (
        render_text(compare(views)),
        render_markdown(compare(views)),
        render_runs(views, width=400),
    ):
        assert not controls(out.replace("\n", "")), out
        assert "run\\x1b]0;PWNED-TITLE" in out
    assert "HTTP 500: \\x1b]0;PWNED-TITLE" in render_runs(views, width=400)


def test_decide_text_and_markdown_show_escapes() -> None:
    from soak.after.decide import decide
    from soak.after.decide_render import render
    from tests.core.test_decide import DFLASH, trial

    hostile = {"model": "m" + HOSTILE}
    recs = trial(
        DFLASH,
        before=hostile,
        candidate=hostile | {"label": "cand" + HOSTILE},
        restored=hostile,
    )
    d = decide(*recs)
    for markdown in (False, True):
        out = render(d, markdown=markdown)
        assert not controls(out.replace("\n", "")), out
        assert "m\\x1b]0;PWNED-TITLE" in out and "cand\\x1b]0;" in out


def test_html_escaping_shows_controls_as_text() -> None:
    from soak.after.report.charts import esc as label
    from soak.after.report.tables import esc

    for out in (esc(HOSTILE), esc({"k": HOSTILE + "\u202e"}), label(HOSTILE + "<b>")):
        assert not controls(out), out
        assert "\\x1b]0;PWNED-TITLE" in out or "\\u001b]0;PWNED-TITLE" in out
    assert label("<b>") == "&lt;b&gt;"
