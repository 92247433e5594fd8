"""The runner's watchers' loop: one step every interval, never piling up, never dying.

A watcher whose loop died on an unexpected exception would leave the rest of the run
unwatched while the verdict still read PASSED. So an exception in a step is printed to
runner.log, kept (``errors``, the first few distinct ones) for the record as a soaktop
failure, and the loop goes on.

A step must not outlast its interval: every request a watcher makes in one is bounded by
:func:`poll_timeout` (shorter than the interval), so a hung source costs one missed sample
a round, never a pile-up and never a wait at the run's phase boundaries.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable

MAX_ERRORS = 10
TIMEOUT_SHARE = 0.8
"""A periodic request may take this share of the interval before it is cut."""
TIMEOUT_CAP_S = 5.0
"""...and never longer than this, however long the interval."""


def poll_timeout(interval_s: float) -> float:
    """The bound of one request of a step that runs every ``interval_s``."""
    return round(min(TIMEOUT_CAP_S, TIMEOUT_SHARE * interval_s), 3)


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
