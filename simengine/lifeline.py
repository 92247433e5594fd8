"""Die with the parent: ``--parent-fd FD`` makes the engine stop when its parent does.

The parent creates a pipe, keeps the write end to itself and hands the read end to the
engine. Nothing is ever written; the kernel closes the write end when the parent ends,
however it ends (``kill -9`` included), and the engine sees end-of-file and, after
``--parent-grace`` seconds, stops as on SIGTERM (its replicas stop, ``--remove-log-dir``
removes its log directory). The pipe works on every POSIX system, needs no polling and
cannot fire early: only the parent's own end makes it.

Linux's ``PR_SET_PDEATHSIG`` is deliberately not used: it fires when the *thread* that
started this process ends, not the parent process, and its signal is handled on the same
event loop as the pipe, so it would add a caveat without adding robustness.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable


def check_fd(fd: int) -> str | None:
    """Why ``fd`` cannot be the parent's pipe (None when it is an open file descriptor)."""
    try:
        os.fstat(fd)
    except OSError as e:
        return f"--parent-fd {fd}: not an open file descriptor ({e.strerror})"
    return None


def watch_parent(loop: asyncio.AbstractEventLoop, fd: int, on_gone: Callable[[], object]) -> None:
    """Call ``on_gone`` once when ``fd`` (the read end of the parent's pipe) reaches
    end-of-file or fails; also at once if the parent is already gone."""
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # end-of-file: the parent, the pipe's only writer, is gone
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(fd)
            on_gone()

    loop.add_reader(fd, readable)
