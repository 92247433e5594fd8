"""Screenshots of a judged two-hour soak at 80×24 and 120×40: the drift beside each
figure, the whole-run charts, the leak rates and the header badge, and that it all fits.

Deterministic: the run directory is written from fixed figures
(``tests/tui/endurance_run.py``) and the replay opens on its last snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tui.endurance_run import write_run
from tests.tui.helpers import view_app
from tui.settings import UiSettings


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_judged_soak_screenshot(
    snap_compare: Callable[..., bool], size: tuple[int, int], tmp_path: Path
) -> None:
    app = view_app(write_run(tmp_path / "run"), settings=UiSettings(theme="dark", ascii=False))
    assert snap_compare(app, terminal_size=size)
