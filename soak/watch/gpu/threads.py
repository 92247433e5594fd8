"""Blocking NVML calls off the event loop: one daemon thread per call.

Every NVML call can block (a driver hung after Xid 79 never returns), so the NVML watch
runs each in a daemon thread of its own and awaits a future that the thread settles on
the loop. A hung call then stalls only its own future, never the loop nor the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

Calls = list[tuple["asyncio.Future[Any]", threading.Thread]]


def in_daemon_thread(fn: Callable[[], _T], name: str, calls: Calls) -> asyncio.Future[_T]:
    """Run ``fn`` in a new daemon thread; the future resolves on the running loop.

    Not ``asyncio.to_thread``: a call into a hung driver would hold an executor thread that
    the interpreter joins at exit, so the runner could never exit after the fault it exists
    to report. One thread per call costs ~0.1 ms, once a second."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return  # cancelled: nobody is waiting
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = fn()
        except BaseException as e:
            error = e
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(settle, value, error)

    # A result nobody awaits any more (a stop, an abandoned open) must not be logged as
    # "exception never retrieved"; those who await it still get the exception.
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    calls[:] = [(f, t) for f, t in calls if t.is_alive()]
    calls.append((fut, thread))
    return fut


def reap(calls: Calls) -> None:
    """Join the call threads that have handed their result back: they are past their last
    statement, so this takes microseconds. One still inside NVML (hung) is left to end with
    the process (it is a daemon)."""
    for fut, thread in calls:
        if fut.done() and not fut.cancelled():
            thread.join(0.5)
    calls[:] = [(f, t) for f, t in calls if t.is_alive()]
