"""How the stream client tells its failures apart, in words fit for the journal.

- An error that says *this host* ran out of something (file descriptors, buffers, memory,
  local ports) is the client's, never the server's (``client_side``).
- A disconnect or reset before any response byte, on a connection reused from the pool,
  is a stale pooled connection (``stale_connection``): the request may be resent once.
- A non-200 body's error message, from the JSON error shapes engines send
  (``message_from_body``).

Failure details are cut at ``loadgen.sse_detail.DETAIL_MAX`` characters (``trunc``).
"""

from __future__ import annotations

import errno
from typing import Final

import aiohttp
import orjson

from loadgen.sse_detail import DETAIL_MAX, error_message

CLIENT_ERRNOS: Final = {
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files in the system",
    errno.ENOBUFS: "no buffer space",
    errno.ENOMEM: "out of memory",
    errno.EADDRNOTAVAIL: "no local port or address available",
}
"""errno → words, for the errors that say this client ran out of something (file
descriptors under ``ulimit -n``, kernel buffers, memory, local ports): the request never
left this host, so the failure is ``client_error``, never the server's ``connect_error``.
The same set as ``probes.neterrors`` (loadgen must not import probes)."""


def client_side(exc: BaseException) -> str | None:
    """``"client-side: too many open files (EMFILE)"`` when ``exc``, or an error it wraps
    (aiohttp's ``os_error``, ``__cause__``, ``__context__``), is one of ``CLIENT_ERRNOS``."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in CLIENT_ERRNOS:
            code = errno.errorcode.get(cur.errno, str(cur.errno))
            return f"client-side: {CLIENT_ERRNOS[cur.errno]} ({code})"
        wrapped = getattr(cur, "os_error", None) if isinstance(cur, aiohttp.ClientError) else None
        todo += [
            x for x in (wrapped, cur.__cause__, cur.__context__) if isinstance(x, BaseException)
        ]
    return None


def trunc(text: str) -> str:
    """``text`` cut to ``DETAIL_MAX`` characters (an ellipsis says it was)."""
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"


def stale_connection(exc: BaseException) -> bool:
    """An error that a closed pooled connection gives before any response byte: a
    disconnect or reset while writing the request or waiting for the status line."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        # With a partial response, aiohttp passes the half-parsed message instead of text.
        return isinstance(exc.message, str)
    return isinstance(exc, aiohttp.ClientOSError) and not isinstance(
        exc, aiohttp.ClientConnectorError
    )


def message_from_body(body: bytes) -> str:
    """The server's error message from a non-200 body (JSON error shapes, else the text)."""
    text: str | None = None
    stripped = body.strip()
    if stripped[:1] in (b"{", b"["):
        try:
            text = error_message(orjson.loads(stripped))
        except orjson.JSONDecodeError:
            text = None
    if text is None:
        text = stripped.decode(errors="replace") or "<empty body>"
    return trunc(text)
