"""Signals while the app runs: a dropped terminal (SIGHUP), SIGTERM, SIGINT.

The handlers run on the app's event loop (``loop.add_signal_handler``), so they may touch
the app. When the app ends, the handlers the CLI had installed go back in place
(``remove_signal_handler`` alone would leave the defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Mapping
from typing import Any


class SignalRelay:
    """Installs loop signal handlers and restores the previous ones."""

    def __init__(self) -> None:
        self._saved: dict[int, Any] = {}

    def install(self, handlers: Mapping[signal.Signals, Callable[[], None]]) -> None:
        """Route each signal to its handler on the running loop (where supported)."""
        loop = asyncio.get_running_loop()
        for sig, handler in handlers.items():
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, handler)
                self._saved[sig] = previous

    def restore(self) -> None:
        """Put back what was there before ``install``."""
        loop = asyncio.get_running_loop()
        for sig, previous in self._saved.items():
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)
        self._saved.clear()
