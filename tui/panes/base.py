"""The pane base class and the small helpers every pane draws with."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.content import Content
from textual.widget import Widget

from soak.safe_text import safe_line
from tui.glyphs import Glyphs
from tui.runview import RunView

Part = str | tuple[str, str] | Content
"""A piece of a line: plain text, ``(text, style)`` or ready Content."""


def line(*parts: Part) -> Content:
    """One line from pieces (styles are theme variables such as ``$text-error``).

    Every text piece goes through :func:`~soak.safe_text.safe_line`: a server's error
    message, model id or label value can hold terminal escapes, which are shown as
    ``\\x1b`` here and never reach the terminal. ``Content`` is literal, so markup in
    such text is shown as written, too."""
    return Content.assemble(*(_safe(p) for p in parts))


def _safe(part: Part) -> Part:
    if isinstance(part, str):
        return safe_line(part)
    if isinstance(part, tuple):
        return (safe_line(part[0]), part[1])
    return part  # ready Content: built from safe pieces by whoever made it


def fit(content: Content, width: int, g: Glyphs) -> Content:
    """``content`` cut to ``width`` cells, with the glyph set's ellipsis when cut."""
    if content.cell_length <= width:
        return content
    room = max(0, width - len(g.ellipsis))
    return Content.assemble(content.truncate(room), g.ellipsis if room else "")


def lines(rows: Iterable[Content | str]) -> Content:
    """Lines joined with newlines."""
    return Content("\n").join(rows)


def muted(s: str) -> tuple[str, str]:
    """Secondary text (dim, so it also reads on a monochrome terminal)."""
    return (s, "dim")


class Pane(Widget):
    """A focusable, maximisable panel that redraws from the latest ``RunView``.

    Subclasses implement ``build``; it gets the content area's size so that a pane can
    abbreviate at 80×24 and show more when wide or maximised.
    """

    can_focus = True
    ALLOW_MAXIMIZE = True
    NUMBER: ClassVar[int] = 0
    TITLE: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__(id=f"pane-{self.NUMBER}")
        self.view: RunView | None = None

    def on_mount(self) -> None:
        self.border_title = f"{self.NUMBER} {self.title_for(self.view)}"

    def title_for(self, view: RunView | None) -> str:
        """The pane's title for ``view`` (``TITLE``; a pane that changes with the run's
        kind says so here)."""
        return self.TITLE

    def show(self, view: RunView) -> None:
        """Draw this frame (keeps it for resizes)."""
        self.view = view
        self.border_title = f"{self.NUMBER} {self.title_for(view)}"
        self.refresh()

    def render(self) -> Content:
        if self.view is None:
            return Content.assemble(muted("waiting for the first snapshot"))
        size = self.content_size
        return self.build(self.view, max(1, size.width), max(1, size.height))

    def build(self, view: RunView, width: int, height: int) -> Content:
        """The pane's content for ``view`` in ``width`` × ``height`` cells."""
        raise NotImplementedError

    @property
    def plain_text(self) -> str:
        """What the pane shows now, without styles (for tests and the help screen)."""
        return self.render().plain
