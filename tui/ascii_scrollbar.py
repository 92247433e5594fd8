"""A scrollbar without block glyphs, for ``--ascii`` terminals.

Textual draws a thumb's fractional ends with ``▁▂▃...``; this renderer draws whole cells
only (the thumb is its background colour, so a blank cell is enough).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.scrollbar import ScrollBar, ScrollBarRender


class AsciiScrollBarRender(ScrollBarRender):
    """Whole-cell thumbs."""

    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


def use_ascii_scrollbars() -> Callable[[], None]:
    """Draw every scrollbar in whole cells from now on; returns the function that
    restores the previous renderer (called when the app unmounts)."""
    saved = ScrollBar.renderer
    ScrollBar.renderer = AsciiScrollBarRender

    def restore() -> None:
        ScrollBar.renderer = saved

    return restore
