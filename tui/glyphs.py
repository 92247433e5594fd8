"""Glyph sets: Unicode blocks and box drawing, or plain ASCII for terminals without them.

Every character the panes draw beyond letters and digits comes from here, so ``--ascii``
(and a non-UTF-8 locale) swaps all of them at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Glyphs:
    """The characters one rendering mode uses."""

    ascii: bool
    spark: str
    """Levels of a sparkline cell, lowest first."""
    bar_full: str
    bar_empty: str
    bar_partial: str
    """Fractions of a cell, smallest first (empty for ASCII: whole cells only)."""
    missing: str
    """Shown for a value that is absent (never 0)."""
    ellipsis: str
    times: str
    degree: str
    sep: str
    arrow: str
    rise: str
    """Before a change upwards (``▲31%``)."""
    fall: str
    level: str
    """A reference level drawn across a chart's empty cells (the drift baseline)."""

    def bar(self, fraction: float | None, width: int) -> str:
        """A horizontal bar ``width`` cells wide filled to ``fraction`` (0–1)."""
        if width <= 0:
            return ""
        if fraction is None or math.isnan(fraction):
            return self.missing.center(width)
        cells = max(0.0, min(1.0, fraction)) * width
        full = int(cells)
        out = self.bar_full * full
        if full < width:
            rest = cells - full
            eighths = int(rest * 8)
            if self.bar_partial and eighths > 0:
                out += self.bar_partial[min(len(self.bar_partial) - 1, eighths)]
            else:
                out += self.bar_empty
        return out + self.bar_empty * (width - len(out))

    def sparkline(self, values: Sequence[float | None], width: int) -> str:
        """The last ``width`` values as one row of levels; gaps (None) are blank cells.

        Scaled from 0 to the largest value shown, so a flat line at zero stays at the
        bottom instead of jumping to the middle.
        """
        shown = list(values)[-width:] if width > 0 else []
        peak = max((v for v in shown if v is not None), default=0.0)
        top = len(self.spark) - 1
        cells = []
        for v in shown:
            if v is None:
                cells.append(" ")
            elif peak <= 0:
                cells.append(self.spark[0])
            else:
                cells.append(self.spark[round(max(0.0, v) / peak * top)])
        return "".join(cells).rjust(width)

    def chart(
        self,
        values: Sequence[float | None],
        width: int,
        rows: int,
        level: float | None = None,
    ) -> list[str]:
        """The last ``width`` values as a bar chart ``rows`` lines high (top line first).

        ``level``: a reference value (the drift baseline) drawn as a dotted line across
        the empty cells of its row; the scale then reaches it too. A one-row chart has
        no room for it."""
        if rows <= 1:
            return [self.sparkline(values, width)]
        shown = list(values)[-width:] if width > 0 else []
        peak = max((v for v in shown if v is not None), default=0.0)
        if level is not None and level > 0:
            peak = max(peak, level)
        steps = len(self.spark)
        level_row = (
            min(rows - 1, int(level / peak * rows))
            if level is not None and level > 0 and peak > 0
            else None
        )
        heights = [
            None if v is None else (0.0 if peak <= 0 else max(0.0, v) / peak * rows * steps)
            for v in shown
        ]
        out = []
        for row in range(rows - 1, -1, -1):
            base = row * steps
            cells = []
            for h in heights:
                if h is None or h <= base:
                    # a zero still draws the lowest level on the bottom row: 0 is data
                    empty = self.level if row == level_row else " "
                    cells.append(self.spark[0] if h is not None and row == 0 else empty)
                elif h >= base + steps:
                    cells.append(self.spark[-1])
                else:
                    cells.append(self.spark[max(0, math.ceil(h - base) - 1)])
            out.append("".join(cells).rjust(width))
        return out


UNICODE = Glyphs(
    ascii=False,
    spark="▁▂▃▄▅▆▇█",
    bar_full="█",
    bar_empty="░",
    bar_partial=" ▏▎▍▌▋▊▉",
    missing="—",
    ellipsis="…",
    times="×",
    degree="°",
    sep="│",
    arrow="→",
    rise="▲",
    fall="▼",
    level="┈",
)
ASCII = Glyphs(
    ascii=True,
    spark="_.,-=+*#",
    bar_full="#",
    bar_empty=".",
    bar_partial="",
    missing="-",
    ellipsis="...",
    times="x",
    degree="",
    sep="|",
    arrow="->",
    rise="+",
    fall="-",
    level=":",
)


def glyphs_for(ascii_only: bool) -> Glyphs:
    """The glyph set for a mode."""
    return ASCII if ascii_only else UNICODE
