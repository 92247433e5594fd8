"""The ``soaktop`` console script with the Textual monitor as its user interface.

``soak`` never imports ``tui`` (import-linter enforces it), so this module wires them:
it hands ``TuiFrontend`` (the factory: ``TuiFrontend(theme, ascii, refresh_s)``) to
``soak.cli.main.main``, which owns every flag (``--theme``/``--ascii``/``--refresh`` included)
and decides when to build it (never with ``--headless`` or without a terminal).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tui.frontend import TuiFrontend


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``soaktop`` with the monitor available."""
    from soak.cli.main import main as cli_main

    return cli_main(argv, ui=TuiFrontend)


if __name__ == "__main__":
    sys.exit(main())
