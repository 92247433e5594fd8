"""``--redact``: endpoints, hostnames and paths never reach the run directory.

One ``Redactor`` per run scrubs free text (event lines, failure details, start-failure
messages) at the point where it is written, so no writer has to remember to do it.
"""

from __future__ import annotations

from typing import Any
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

    def text(self, s: str) -> str:
        """``s`` with every endpoint reference replaced."""
        for needle, repl in self._pairs:
            s = s.replace(needle, repl)
        return s

    def obj(self, value: Any) -> Any:
        """A JSON-like value with every string (keys too) scrubbed; structure untouched."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.obj(v) for v in value]
        return value
