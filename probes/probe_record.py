"""What a probe leaves behind: its result line and the HTTP exchanges behind it.

:class:`ProbeResult` is one line of ``probes.jsonl``; :class:`Exchange` is one HTTP request
and what came back, kept whole for judging (``probes.probe``) and written, cut at
``BODY_LIMIT``, into a failed probe's evidence file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Outcome = Literal["pass", "contract", "availability", "client"]

BODY_LIMIT = 1 << 20
"""Bytes of a response written into evidence (``Exchange.as_evidence``)."""

SCRUB_MARGIN = 4096
"""Characters past ``BODY_LIMIT`` that the evidence scrubber sees before the cut."""


class ProbeResult(BaseModel):
    """One probe attempt: a line of ``probes.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    phase: str
    """before, canary or after."""
    suite: str
    kind: str
    task: str
    index: int
    """1-based position of the task in its suite (``json#7``)."""
    round: int | None = None
    """Canary round (1, 2, ...); None for the before/after gates."""
    attempt: int = 0
    """0 for the first try; k for the k-th retry (``--probe-retries``)."""
    endpoint: int = 0
    request_id: str
    outcome: Outcome
    reason: str = ""
    """Why it did not pass, in words; empty when it passed."""
    status: int | None = None
    """HTTP status of the last exchange (None when none came back)."""
    finish_reason: str | None = None
    latency_s: float | None = None
    """Request sent → answer complete, summed over the probe's exchanges."""
    t_s: float
    """Seconds since the run origin when the probe started."""
    wall: str
    requests: int = 0
    """HTTP requests sent (a tool-result round trip sends two)."""
    completed: int = 0
    """Exchanges that ended normally with a usage block (reconciliation)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    evidence: str | None = None
    """Path of the evidence file in the run directory (failed probes)."""

    @property
    def label(self) -> str:
        """``json#7 (invoice)``."""
        return f"{self.suite}#{self.index} ({self.task})"


@dataclass
class Exchange:
    """One HTTP request and what came back, for evidence and accounting."""

    url: str
    request_id: str
    body: dict[str, Any]
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    """The whole response body (at most ``probes.probe.FULL_BODY_LIMIT`` bytes of it)."""
    oversize: bool = False
    """The response went past ``probes.probe.FULL_BODY_LIMIT``: reading stopped, ``text``
    is its start."""
    error: str | None = None
    latency_s: float | None = None
    usage: dict[str, Any] | None = None

    def as_evidence(self, scrub: Callable[[str], str] | None = None) -> dict[str, Any]:
        """The exchange as written into an evidence file (no auth headers: none are kept);
        the body is cut at ``BODY_LIMIT`` bytes, and ``truncated`` says whether it was
        (or whether the answer was larger than soaktop keeps). ``scrub`` (the run's
        redactor) sees the whole body before the cut: a secret the cut would halve, or
        one a stream split across chunks, is still found whole."""
        text, longer = self.text, False
        if scrub is not None:  # only what can be kept (a margin for a key across the cut)
            longer = len(text) > BODY_LIMIT + SCRUB_MARGIN
            text = scrub(text[: BODY_LIMIT + SCRUB_MARGIN])
        body, cut = _evidence_body(text)
        return {
            "request": {"method": "POST", "url": self.url, "x_request_id": self.request_id}
            | {"body": self.body},
            "response": {
                "status": self.status,
                "headers": self.headers,
                "body": body,
                "truncated": cut or longer or self.oversize,
            },
            "error": self.error,
            "latency_s": self.latency_s,
        }


def _evidence_body(text: str) -> tuple[str, bool]:
    """``text`` cut to at most ``BODY_LIMIT`` UTF-8 bytes (whole characters), and whether
    it was cut."""
    if len(text) * 4 <= BODY_LIMIT:  # cannot be over the limit: skip encoding
        return text, False
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= BODY_LIMIT:
        return text, False
    return raw[:BODY_LIMIT].decode("utf-8", errors="ignore"), True
