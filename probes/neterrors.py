"""Client-side network errors: soaktop could not even make the socket.

Out of file descriptors (EMFILE under ``ulimit -n 1024`` at high concurrency), out of
kernel buffers or local ports: the request never left this host, so the failure is the
client's, never the server's. httpx lets some of these escape as a bare ``OSError`` and
wraps others (``ConnectError`` caused by an ``OSError``, or by an exception group of
them); :func:`client_side` looks through all of those.
"""

from __future__ import annotations

import errno

CLIENT_ERRNOS: dict[int, str] = {
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files in the system",
    errno.ENOBUFS: "no buffer space",
    errno.ENOMEM: "out of memory",
    errno.EADDRNOTAVAIL: "no local port or address available",
}
"""errno → words, for the errors that say the client ran out of something."""


def client_side(e: BaseException) -> str | None:
    """``"client-side: too many open files (EMFILE)"`` when ``e`` (or what caused it) is
    the client's own resource error; None when the failure may be the server's."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in CLIENT_ERRNOS:
            code = errno.errorcode.get(cur.errno, str(cur.errno))
            return f"client-side: {CLIENT_ERRNOS[cur.errno]} ({code})"
        todo += [x for x in (cur.__cause__, cur.__context__) if x is not None]
        todo += [x for x in getattr(cur, "exceptions", ()) if isinstance(x, BaseException)]
    return None
