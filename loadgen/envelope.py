"""The per-request timing envelope: what one streamed request measured.

This is the contract between the load generator (which fills it in on the hot path), the
runner (which journals it to ``requests.jsonl`` and feeds live statistics) and
``soaktop verify`` (which recomputes the record from the journal). Times are
``time.perf_counter_ns()`` values; the journal stores them relative to the run's
monotonic origin so they line up with events and telemetry.

Names follow DESIGN.md §5 exactly:
- TTFT  = sent → first chunk carrying content, reasoning or a tool-call delta
          (role-only chunks do not count);
- first_byte = sent → first response byte (headers);
- first_content = sent → first visible content (reasoning models differ from TTFT);
- E2E   = sent → stream end;
- ITL   = gaps between successive token-carrying chunks;
- TPOT  = (E2E − TTFT) / (output_tokens − 1), output tokens from the server's ``usage``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class FailureClass(StrEnum):
    """Why a request failed. Availability and protocol classes, never contract classes.

    Contract failures (bad JSON, wrong tool) belong to probes, not to load requests.
    """

    HTTP_4XX = "http_4xx"
    """The server answered a 4xx status (validation, unknown model, rate limit)."""
    HTTP_5XX = "http_5xx"
    """The server answered a 5xx status (internal error, engine dead, overloaded)."""
    CONNECT = "connect_error"
    """No connection: refused, reset before the response, DNS, fd exhaustion while connecting."""
    READ_TIMEOUT = "read_timeout"
    """No bytes for longer than the read timeout (a stalled stream or a hung server)."""
    STREAM_CUT = "stream_cut"
    """The stream ended (connection closed or reset) before ``data: [DONE]``."""
    ERROR_EVENT = "error_event"
    """An ``error`` object inside an HTTP 200 stream (vLLM's mid-stream failure shape)."""
    MALFORMED = "malformed_sse"
    """A chunk that is not valid SSE or not valid JSON."""
    CLIENT = "client_error"
    """The client itself failed (an exception in soaktop); the server may be blameless."""


AVAILABILITY_CLASSES = frozenset(
    {
        FailureClass.HTTP_5XX,
        FailureClass.CONNECT,
        FailureClass.READ_TIMEOUT,
        FailureClass.STREAM_CUT,
        FailureClass.ERROR_EVENT,
    }
)


@dataclass(slots=True)
class RequestResult:
    """One request's measurements. ``None`` means "did not happen / not reported", never 0."""

    request_id: str
    worker: int
    prompt_id: int
    sent_ns: int
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_content_ns: int | None = None
    end_ns: int | None = None
    status: int | None = None
    """HTTP status code, ``None`` if no response arrived."""
    failure: FailureClass | None = None
    failure_detail: str | None = None
    """Words for the failure: the server's error message, the exception, the byte offset."""
    prompt_tokens: int | None = None
    """From the server's ``usage``; ``None`` when usage was missing."""
    output_tokens: int | None = None
    """From the server's ``usage``; ``None`` when usage was missing."""
    chunks: int = 0
    """Token-carrying chunks received (content, reasoning or tool-call deltas)."""
    finish_reason: str | None = None
    itl_ns: list[int] = field(default_factory=list)
    """Gaps between successive token-carrying chunks, in ns (len == chunks − 1)."""
    cancelled: bool = False
    """Cut by soaktop itself (drain deadline or abort) — not a server failure."""

    @property
    def ok(self) -> bool:
        """Completed with ``[DONE]``, HTTP 200 and no failure."""
        return self.failure is None and not self.cancelled and self.end_ns is not None
