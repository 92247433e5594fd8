"""Connection-level parts of the streaming client: the socket read size, the hand-over of
the body's read timeout to the watchdog, and when a failed send may be resent.

Split from :mod:`loadgen.client` (the hot path) so that file holds the request itself.
"""

from __future__ import annotations

import contextlib
from typing import Final

import aiohttp

from loadgen.client_errors import stale_connection
from loadgen.envelope import RequestResult

READ_SIZE: Final = 64 * 1024
"""Largest socket read. asyncio's selector transport (CPython 3.11) reads with
``recv(256 KiB)``: a fresh 256 KiB bytes object per read, above glibc's mmap threshold, so
every read cost an mmap, page faults and a munmap — measured here as ~20 µs of system CPU
per streamed token at 256 paced streams. 64 KiB reads come from the heap."""


def resend_after(exc: BaseException, r: RequestResult, reused: bool, got_headers: bool) -> bool:
    """Whether to resend after ``exc``: once, on a reused pooled connection, before any
    response byte (module doc). Then ``r.stale_retry`` says so: nothing was measured yet,
    so the resend starts the request anew."""
    if not (reused and not (got_headers or r.stale_retry) and stale_connection(exc)):
        return False
    r.stale_retry = True
    return True


def tune_connection(resp: aiohttp.ClientResponse) -> bool:
    """Cap the socket read size (``READ_SIZE``) and hand the body's read timeout from
    aiohttp's per-read timer to the watchdog. True if the watchdog must guard the body.

    aiohttp re-arms ``read_timeout`` for every request on a connection (it does the same
    switch-off for websockets); the read-size cap stays with the connection.
    """
    conn = resp.connection
    if conn is None:
        return False
    transport = conn.transport
    if transport is not None and getattr(transport, "max_size", 0) > READ_SIZE:
        with contextlib.suppress(AttributeError):  # another loop's transport (uvloop)
            transport.max_size = READ_SIZE  # type: ignore[attr-defined]
    protocol = conn.protocol
    if protocol is None or not hasattr(protocol, "read_timeout"):
        return False
    protocol.read_timeout = None
    return True
