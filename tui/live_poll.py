"""The live monitor's reading: the run directory and the runner, polled off the UI loop.

One poll asks the runner whether it still runs, then reads what is new in the run
directory (``tui.reader.RunFollower``, in a thread: a slow disk never blocks the screen)
and hands the app one message per kind of news (``tui.messages``). Reading ends for good
once the record appeared or the runner is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from textual.message import Message

from tui.messages import EventsArrived, MetaFound, RunEnded, RunnerDied, SnapshotTick
from tui.reader import FollowUpdate, HistoryPoint, RunFollower, TrendPoint
from tui.runner_link import RunnerLink


class LivePoll:
    """Follows one run directory (and its runner, when known) for the live app."""

    def __init__(
        self, run_dir: Path, runner: RunnerLink | None, post: Callable[[Message], object]
    ) -> None:
        self.runner = runner
        self.done = False
        """The record appeared or the runner is gone: nothing more to read."""
        self._follower = RunFollower(run_dir)
        self._post = post
        self._lock = asyncio.Lock()

    async def loop(self, refresh_s: float) -> None:
        """Poll until done; re-armed after each read, so a slow disk never piles up reads."""
        while not self.done:
            await self.poll()
            await asyncio.sleep(refresh_s)

    async def poll(self) -> None:
        """Read the run directory once and post what is new."""
        async with self._lock:
            if self.done:
                return
            # The runner first, then the files: a runner that exited has already written
            # its record, if it wrote one.
            rc = self.runner.poll() if self.runner is not None else None
            update, history, windows = await asyncio.to_thread(self._read)
            if update.record is not None or rc is not None:
                self.done = True
        if update.meta is not None:
            self._post(MetaFound(update.meta))
        if update.events:
            self._post(EventsArrived(update.events))
        if update.snapshot is not None:
            self._post(SnapshotTick(update.snapshot, history, update.skipped, windows))
        if update.record is not None:
            self._post(RunEnded(update.record))
        elif rc is not None:
            self._post(RunnerDied(rc))

    def _read(
        self,
    ) -> tuple[FollowUpdate, tuple[HistoryPoint, ...], tuple[TrendPoint, ...]]:
        update = self._follower.poll()
        return update, self._follower.history, self._follower.windows
