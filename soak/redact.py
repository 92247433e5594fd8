"""``--redact``: endpoints, hostnames and paths never reach the run directory; secrets never
reach it at all.

One ``Redactor`` per run scrubs free text (event lines, failure details, start-failure
messages, probe evidence, server-log excerpts) at the point where it is written, so no
writer has to remember to do it. The API key is scrubbed with or without ``--redact``: a
server log may print it (vLLM logs its ``api_key`` argument at start-up).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

_EDGE_BEFORE = r"(?<![A-Za-z0-9_.-])"
_EDGE_AFTER = r"(?![A-Za-z0-9_-])"


class Redactor:
    """Replaces each endpoint's URL, host:port and host with ``<endpoint i>`` (with
    ``--redact``) and, always, every secret (API key) with ``<secret>``.

    Endpoint names are replaced only where they stand alone (a host ``ai`` must not turn
    ``availability`` into nonsense); secrets are replaced wherever they occur.
    """

    def __init__(
        self, endpoints: list[str], enabled: bool, secrets: list[str] | None = None
    ) -> None:
        self.enabled = enabled
        self._secrets = sorted({s for s in secrets or [] if len(s) >= 4}, key=len, reverse=True)
        names: list[tuple[str, str]] = []
        if enabled:
            for i, url in enumerate(endpoints):
                parts = urlsplit(url)
                for needle in (url, parts.netloc, parts.hostname or ""):
                    if needle:
                        names.append((needle, f"<endpoint {i}>"))
        # Longest first, so a URL is replaced whole before its host:port is.
        names.sort(key=lambda p: -len(p[0]))
        self._names = [
            (re.compile(_EDGE_BEFORE + re.escape(n) + _EDGE_AFTER), repl) for n, repl in names
        ]

    @property
    def active(self) -> bool:
        """Whether there is anything to scrub at all (writers skip the work otherwise)."""
        return bool(self._secrets or self._names)

    def text(self, s: str) -> str:
        """``s`` with every secret and endpoint reference replaced."""
        for secret in self._secrets:
            s = s.replace(secret, "<secret>")
        for pattern, repl in self._names:
            s = pattern.sub(repl, s)
        return s

    def obj(self, value: Any) -> Any:
        """A JSON-like value with every string value scrubbed; keys (soaktop's own names)
        and structure untouched."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.obj(v) for v in value]
        return value
