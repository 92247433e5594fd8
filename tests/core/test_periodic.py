"""A watcher's loop survives a failing step and says so (a dead watcher would let a run
pass unwatched)."""

from __future__ import annotations

import asyncio

from soak.watch.periodic import MAX_ERRORS, every


async def test_a_failing_step_is_recorded_and_the_loop_goes_on():
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls in (2, 3):
            raise OSError("disk full")

    errors: list[str] = []
    task = asyncio.create_task(every(0.01, step, "fault watch", errors))
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert calls > 5  # it kept going after the failures
    assert errors == ["fault watch: OSError: disk full"]  # said once, not per tick


async def test_distinct_errors_are_bounded():
    n = 0

    async def step() -> None:
        nonlocal n
        n += 1
        raise ValueError(f"bad {n}")

    errors: list[str] = []
    task = asyncio.create_task(every(0.001, step, "w", errors))
    await asyncio.sleep(0.3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert n > MAX_ERRORS and len(errors) == MAX_ERRORS
