"""Is the client behind the server's writes? Measured at the socket, on a sample of reads.

Loop lag and CPU say the client is busy, not that its latencies are its own. What says
it directly is the kernel's receive queue: when the read loop resumes with a chunk, are
more bytes already waiting in the socket (``FIONREAD``/``SIOCINQ``)? A client that keeps up
reads each chunk as it lands, and the queue is empty; one that is behind finds the next
events there already, and every ITL and TTFT it reports includes that wait.

The read loop (:mod:`loadgen.client`) asks once every ``SAMPLE_EVERY`` token events of a
stream, after the read that reached the count — a countdown and a branch per
token-carrying read, one ``ioctl`` per sample — and counts on the request's
``RequestResult``: samples, samples that found bytes queued, and the most bytes found.
Counted in events, not reads: a client that is behind reads several events at once, and
a count of reads would sample it least when it matters most (at most one sample a read).
A socket the platform cannot ask (no ``FIONREAD``, a transport without a raw socket, a
TLS one whose bytes are ciphertext) gives no samples: "not measured", never 0; so does a
sample after the stream's connection was released to the pool or closed (the probe holds
the socket object, not its number, which by then may be another connection's).

The client also counts every sample in a ``ReadTally`` as it is taken; the snapshot tick
takes its deltas (:meth:`loadgen.live.LiveLoadStats.tick_reads`), so each second's share
is that second's. The verdict's ``client_behind`` rule counts the seconds whose share
passed ``max_client_behind``, held for ``client_overload_s``.
"""

from __future__ import annotations

import fcntl
import sys
import termios
from typing import Any, Final

SAMPLE_EVERY: Final = 32
"""Token events between two samples of a stream's receive queue. Measured here: an
``ioctl`` ~1.5 µs, ~0.05 µs a token; the countdown ~0.02 µs a read — against ~26 µs of
client CPU a paced token."""
FIRST_SAMPLE: Final = 8
"""A stream's first sample comes after its 8th event: a load of short answers (15 tokens)
is measured too, at one ``ioctl`` a request."""
NOT_SAMPLED: Final = 1 << 62
"""The countdown of a stream whose socket cannot be asked: never reaches 0."""
MIN_SAMPLES_1S: Final = 20
"""Fewest samples for a tick's behind share to be decided (fewer: carried to the next
tick; see ``loadgen.live.LiveLoadStats.tick_reads``)."""
UNDECIDED_S: Final = 5.0
"""Seconds without enough samples to decide (an idle or thin load) that end a behind
streak."""

_FIONREAD: Final = getattr(termios, "FIONREAD", None)
_ZERO: Final = b"\0\0\0\0"


class QueueProbe:
    """One stream's socket, asked how many bytes wait in its receive queue.

    Holds the connection and the socket *object*, never a bare fd number: once the
    connection is released to the pool (its socket may carry another request by then),
    closing, or closed (its number may belong to another connection or file by then), a
    sample is "not measured" instead of another socket's queue.
    """

    __slots__ = ("_conn", "_sock")

    def __init__(self, conn: Any, sock: Any) -> None:
        self._conn = conn
        """The aiohttp ``Connection``: its ``transport`` is None once released or lost."""
        self._sock = sock
        """The transport's socket (``fileno()`` is -1 once it is closed)."""

    def queued(self) -> int:
        """Bytes waiting in the socket's receive queue now; -1 when they cannot be asked
        (released, closing or closed under the stream; an ``ioctl`` that fails)."""
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            return -1
        try:
            fd = self._sock.fileno()
            if fd < 0:
                return -1
            return int.from_bytes(fcntl.ioctl(fd, _FIONREAD, _ZERO), sys.byteorder)  # type: ignore[arg-type]
        except (OSError, ValueError, TypeError, AttributeError):
            return -1


def queue_probe(resp: Any) -> QueueProbe | None:
    """The probe of the raw socket under an aiohttp response; None when there is none to
    ask (no ``FIONREAD``, no raw socket, TLS, a connection already released)."""
    if _FIONREAD is None:
        return None
    conn = getattr(resp, "connection", None)
    transport = getattr(conn, "transport", None) if conn is not None else None
    if transport is None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None:
        return None  # TLS: the socket's bytes are ciphertext, not events
    return QueueProbe(conn, sock)


class ReadTally:
    """Samples and hits of every stream of a client, counted as they are taken, so that
    a once-a-second tick sees *when* the client was behind (a request's own counts reach
    the live stats only at its end: seconds, or minutes, later)."""

    __slots__ = ("hits", "samples")

    def __init__(self) -> None:
        self.samples = 0
        self.hits = 0


PROCESS_TALLY: Final = ReadTally()
"""The process's tally: one runner, one ``StreamClient``, per process (its default)."""


class Streak:
    """How long a condition has held (by tick times), and its longest stretch with the
    mean of a figure over it."""

    __slots__ = ("_n", "_sum", "best_mean", "longest_s", "since")

    def __init__(self) -> None:
        self.since: float | None = None
        self.longest_s = 0.0
        self.best_mean: float | None = None
        """The figure's mean over the longest stretch."""
        self._sum = 0.0
        self._n = 0

    def update(self, on: bool, t: float, value: float = 0.0) -> None:
        """One tick at ``t``: the condition held (``on``) with the figure at ``value``."""
        if not on:
            self.since = None
            return
        if self.since is None:
            self.since, self._sum, self._n = t, 0.0, 0
        self._sum += value
        self._n += 1
        span = t - self.since
        if span >= self.longest_s:
            self.longest_s = span
            self.best_mean = self._sum / self._n
