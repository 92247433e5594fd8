"""Glyph sets and number labels: missing is not zero; ASCII mode is pure ASCII."""

from __future__ import annotations

from tui.fmt import mmss, secs
from tui.glyphs import ASCII, UNICODE


def test_bars_and_sparklines() -> None:
    assert UNICODE.bar(0.5, 4) == "██░░"
    assert ASCII.bar(0.5, 4) == "##.."
    assert ASCII.bar(None, 5) == "  -  "
    assert UNICODE.sparkline([0, 1, 2, None, 4], 5) == "▁▃▅ █"
    assert ASCII.sparkline([0.0, 0.0], 4) == "  __"
    rows = ASCII.chart([1, 2, 4], 3, 2)
    assert len(rows) == 2 and rows[1].endswith("##")
    for text in (ASCII.bar(0.33, 9), ASCII.sparkline([1, 5, 3], 3), *ASCII.chart([3, 1], 2, 3)):
        assert text.isascii()


def test_labels() -> None:
    assert secs(None, UNICODE) == "—" and secs(None, ASCII) == "-"
    assert secs(0.0464, UNICODE) == "46ms"
    assert secs(2.1207, UNICODE) == "2.12s"
    assert secs(0.0006, UNICODE) == "0.6ms"
    assert mmss(75) == "01:15" and mmss(3725) == "1:02:05" and mmss(None) == "--:--"
