"""``--redact``: endpoints, hostnames and paths never reach the run directory.

One ``Redactor`` per run scrubs free text (event lines, failure details, start-failure
messages) at the point where it is written, so no writer has to remember to do it.
"""

from __future__ import annotations

from urllib.parse import urlsplit


class Redactor:
    """Replaces each endpoint's URL, host:port and host with ``<endpoint i>``."""

    def __init__(self, endpoints: list[str], enabled: bool) -> None:
        self.enabled = enabled
        pairs: list[tuple[str, str]] = []
        if enabled:
            for i, url in enumerate(endpoints):
                parts = urlsplit(url)
                for needle in (url, parts.netloc, parts.hostname or ""):
                    if needle:
                        pairs.append((needle, f"<endpoint {i}>"))
        # Longest first, so a URL is replaced whole before its host:port is.
        self._pairs = sorted(pairs, key=lambda p: -len(p[0]))
        self._bpairs = [(a.encode(), b.encode()) for a, b in self._pairs]

    def text(self, s: str) -> str:
        """``s`` with every endpoint reference replaced."""
        for needle, repl in self._pairs:
            s = s.replace(needle, repl)
        return s

    def raw(self, b: bytes) -> bytes:
        """The same for an already-serialized line."""
        for needle, repl in self._bpairs:
            b = b.replace(needle, repl)
        return b
