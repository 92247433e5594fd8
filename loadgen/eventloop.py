"""The event loop the load runs on: uvloop where it exists, asyncio's otherwise.

uvloop is part of the client's CPU budget (CLIENT_COST.md): measured side by side with
``bench/client_cost.py`` it takes about 16 % off the CPU per streamed token at 256 paced
streams, which is what brings the client inside the ≤ 25 µs/token target. The runner and
the benchmark's driver both start their loop here, so the benchmark measures the product.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(prefer_uvloop: bool = True) -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """(name, factory) of the loop to use; asyncio's own when uvloop is absent or refused."""
    if prefer_uvloop:
        try:
            import uvloop
        except ImportError:  # e.g. Windows, where uvloop does not exist
            pass
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], prefer_uvloop: bool = True) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    _, factory = loop_factory(prefer_uvloop)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
