"""The soak warm-up: the first seconds (``90s``) or requests (``200req``) of the load.

Its requests are journaled with phase ``warmup`` (as they are sent: a request belongs to
the warm-up when it was *sent* before the warm-up ended), so the record's load figures,
the window series and the drift baseline leave them out, and ``verify`` sees the same
split in ``requests.jsonl``. A count of requests ends when that many have finished: the
requests still in flight then were sent during the warm-up and stay in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPEC = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|m|req)?\s*$")
LONGEST_WARMUP_S = 86_400.0
MOST_WARMUP_REQUESTS = 10_000_000


@dataclass(frozen=True)
class Warmup:
    """A parsed ``--warmup``: exactly one of ``seconds`` and ``requests`` is set."""

    spec: str
    seconds: float | None = None
    requests: int | None = None


def parse_warmup(text: str) -> Warmup:
    """``90s``/``90`` (seconds), ``2m`` (minutes) or ``200req`` (finished requests).

    Raises ``ValueError`` naming the value and what is allowed."""
    m = _SPEC.match(text)
    allowed = "a duration such as 90s or 2m, or a number of finished requests such as 200req"
    if m is None:
        raise ValueError(f"warmup {text[:40]!r} is not a warm-up (allowed: {allowed})")
    number, unit = m.group(1), m.group(2) or "s"
    if unit == "req":
        if "." in number:
            raise ValueError(f"warmup {text!r}: a request count is a whole number ({allowed})")
        n = int(number)
        if not 1 <= n <= MOST_WARMUP_REQUESTS:
            raise ValueError(f"warmup {text!r}: from 1 to {MOST_WARMUP_REQUESTS:,} requests")
        return Warmup(spec=f"{n}req", requests=n)
    seconds = float(number) * (60.0 if unit == "m" else 1.0)
    if not 0 < seconds <= LONGEST_WARMUP_S:
        raise ValueError(f"warmup {text!r}: from more than 0 s up to 24 h ({allowed})")
    return Warmup(spec=f"{seconds:g}s", seconds=seconds)


class WarmupClock:
    """Decides each finished request's phase; held by the request sink.

    ``end_ns`` is when the warm-up ended (``perf_counter_ns``), None while it lasts. A
    timed warm-up's end is known when the barrier releases; a counted one's when its
    ``requests``-th request finishes."""

    __slots__ = ("_requests", "end_ns", "finished", "journaled", "spec")

    def __init__(self, warmup: Warmup) -> None:
        self.spec = warmup
        self.end_ns: int | None = None
        self.finished = 0
        self.journaled = 0
        """Requests journaled with phase ``warmup``."""
        self._requests = warmup.requests

    def released(self, barrier_ns: int) -> None:
        """The barrier released: a timed warm-up's end is now known."""
        if self.spec.seconds is not None:
            self.end_ns = barrier_ns + int(self.spec.seconds * 1e9)

    def phase(self, sent_ns: int, now_ns: int) -> str:
        """``warmup`` or ``load`` for a request sent at ``sent_ns`` finishing now. Returns
        ``load`` the moment a counted warm-up's last request finished (that one included
        in the warm-up)."""
        end = self.end_ns
        if end is not None and sent_ns >= end:
            return "load"
        self.journaled += 1
        if self._requests is not None and end is None:
            self.finished += 1
            if self.finished >= self._requests:
                self.end_ns = now_ns
        return "warmup"

    def left_s(self, now_ns: int) -> float | None:
        """Seconds of a timed warm-up still to go (None: counted, unknown yet, or over)."""
        if self.end_ns is None or now_ns >= self.end_ns:
            return None
        return (self.end_ns - now_ns) / 1e9
