"""The runner's watchers' loop: one step every interval, never piling up, never dying.

A watcher whose loop died on an unexpected exception would leave the rest of the run
unwatched while the verdict still read PASSED. So an exception in a step is printed to
runner.log, kept (``errors``, the first few distinct ones) for the record as a soaktop
failure, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable

MAX_ERRORS = 10


async def every(
    interval_s: float, step: Callable[[], Awaitable[object]], name: str, errors: list[str]
) -> None:
    """Run ``step`` now and then every ``interval_s`` (a slow step delays the next one)."""
    while True:
        start = time.monotonic()
        try:
            await step()
        except Exception as e:
            traceback.print_exc()  # into runner.log
            msg = f"{name}: {type(e).__name__}: {e}"[:300]
            if msg not in errors and len(errors) < MAX_ERRORS:
                errors.append(msg)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - start)))
