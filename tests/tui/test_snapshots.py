"""Screenshots (pytest-textual-snapshot) of a replay at 80×24 and 160×48, dark and light.

Deterministic: a replay of a fixture run with the cursor on a fixed snapshot (the load
phase just after the Xid fault); nothing on screen comes from the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from tests.tui.helpers import FIXTURES, XID, view_app
from tui.settings import UiSettings

MID_LOAD = 12
"""Snapshot index shown: load 00:14 of 00:20, after the Xid on GPU 1:1."""


async def _to_mid_load(pilot: Pilot[object]) -> None:
    pilot.app.move_cursor(MID_LOAD)  # type: ignore[attr-defined]
    await pilot.pause()


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_monitor_screenshot(
    snap_compare: Callable[..., bool], theme: str, size: tuple[int, int]
) -> None:
    app = view_app(XID, settings=UiSettings(theme=theme, ascii=False))
    assert snap_compare(app, terminal_size=size, run_before=_to_mid_load)


MATRIX_REP = 7
"""Snapshot index of the matrix fixture shown: cell 2/4 (~64 / C4), rep 2 of 3."""


async def _to_matrix_rep(pilot: Pilot[object]) -> None:
    pilot.app.move_cursor(MATRIX_REP)  # type: ignore[attr-defined]
    await pilot.pause()


def test_matrix_screenshot(snap_compare: Callable[..., bool]) -> None:
    """A matrix run at 80×24: the progress in the header and pane 3, per-cell medians."""
    app = view_app(FIXTURES / "matrix", settings=UiSettings(theme="dark", ascii=False))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_to_matrix_rep)
