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
    """Why a request failed: availability, protocol and contract classes.

    One contract class, for the load requests of a mix's class that carries a contract
    (``--mix``: a ``response_format`` JSON schema, a required tool call; see
    :mod:`loadgen.answer_contract`): the server answered, completely, but not what the
    request asked for, the same classification as the gates (:mod:`probes.contract`).
    """

    HTTP_4XX = "http_4xx"
    """The server answered a 4xx status (validation, unknown model, rate limit)."""
    HTTP_5XX = "http_5xx"
    """The server answered a 5xx status (internal error, engine dead, overloaded)."""
    CONNECT = "connect_error"
    """No connection: refused, reset before the response, DNS. This client's own fd, buffer
    or port exhaustion (EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL) is ``client_error``."""
    READ_TIMEOUT = "read_timeout"
    """No bytes for longer than the read timeout (a stalled stream or a hung server)."""
    STREAM_CUT = "stream_cut"
    """The stream ended (connection closed or reset) before ``data: [DONE]``."""
    ERROR_EVENT = "error_event"
    """An ``error`` object inside an HTTP 200 stream (vLLM's mid-stream failure shape)."""
    MALFORMED = "malformed_sse"
    """A chunk that is not valid SSE or not valid JSON."""
    EMPTY_STREAM = "empty_stream"
    """An HTTP 200 stream that reached ``[DONE]`` carrying no output: no token-carrying
    chunk (content, text, reasoning or a tool-call delta), and not a finished generation
    either — a stream without tokens is a success only when the server says it finished
    (a ``finish_reason``) after exactly one completion token (``usage``): a model that
    ends its answer at once. The server said "OK" and delivered nothing."""
    BAD_USAGE = "impossible_usage"
    """A ``usage`` block whose numbers cannot be true: not JSON integers (floats, strings,
    booleans), negative, ``completion_tokens`` above the request's ``max_tokens``,
    ``total_tokens`` below one of its parts, or beyond any context (≥ 2^31). Its tokens
    never enter the token totals (see ``loadgen.outcome.usage_problem``)."""
    CONTRACT = "contract_error"
    """An HTTP 200 stream that completed, but whose answer breaks its workload class's
    contract: not strict JSON, not valid against the class's ``json_schema``, no tool call
    where one is required, or too long to check (past ``loadgen.answer_text``'s bound).
    Never an availability failure: the service delivered, the answer is wrong."""
    CLIENT = "client_error"
    """The client itself failed (an exception in soaktop, or it ran out of file descriptors,
    buffers or local ports: "client-side: too many open files (EMFILE)"); the server may be
    blameless."""


AVAILABILITY_CLASSES = frozenset(
    {
        FailureClass.HTTP_5XX,
        FailureClass.CONNECT,
        FailureClass.READ_TIMEOUT,
        FailureClass.STREAM_CUT,
        FailureClass.ERROR_EVENT,
        FailureClass.EMPTY_STREAM,  # the service answered, but with nothing
    }
)
"""Classes that mean the service did not deliver. ``malformed_sse`` and
``impossible_usage`` are protocol classes: something arrived, but not something true;
``contract_error`` is a contract class: it arrived whole, but not what was asked."""


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
    max_tokens: int | None = None
    """The output limit the request asked for (``max_tokens``); ``usage`` above it is
    impossible. ``None``: unknown, only the limit-free checks apply."""
    stale_retry: bool = False
    """Sent a second time, on a fresh connection: the first send went out on a pooled
    connection the server had already closed, and failed before any response byte (see
    ``loadgen.client``). The timings are the second send's."""
    sanity: tuple[str, ...] = ()
    """The sanity flags of a completed response (``loadgen.sanity.SanityFlag`` values;
    empty: nothing wrong, or the checks were off). Set at the stream's end, for ``ok``
    results only."""
    intended_ns: int | None = None
    """Open loop only: when the schedule meant the request to be sent (``loadgen.arrivals``,
    same clock as ``sent_ns``); ``sent_ns`` − this is the client's lateness. ``None``: the
    closed loop, where a request is sent when its worker is free."""
    workload_class: str | None = None
    """The workload class of a mixed load (``--mix``: ``loadgen.mix``); None outside a mix."""
    step: int | None = None
    """The load step the request was sent in (0-based: a ``--stages`` stage, a ``--sweep``
    step, a live change of rate or concurrency); None for a load without steps."""
    session: int | None = None
    """A conversation load only (``--turns``: :mod:`loadgen.conversation`): the session's
    number (0-based, in start order); None otherwise."""
    turn: int | None = None
    """A conversation load only: the turn within its session (1-based); None otherwise.
    The client keeps the answer's visible text for such a request (``answer``)."""
    answer: str | None = None
    """A conversation request's visible answer, bounded (``loadgen.answer_text``): the next
    turn's history. Never journaled; None for every other request."""
    answer_truncated: bool = False
    """The answer ran past the bound and ``answer`` holds only its head."""
    queue_samples: int = 0
    """Reads of this stream after which its socket's receive queue was sampled (once every
    ``loadgen.read_health.SAMPLE_EVERY`` token events); 0: not measured (a short stream, or
    a socket the platform cannot ask) — never "nothing queued"."""
    queue_hits: int = 0
    """Of those, the samples that found bytes already waiting in the kernel's receive
    queue: the server had written more than the client had read."""
    queued_bytes_max: int = 0
    """The most bytes a sample found waiting."""
    coalesced: int = 0
    """Token events that arrived in a read with an earlier one (a read of n events adds
    n − 1): the ITL gaps of 0. ``chunks − coalesced`` is the token-carrying reads."""

    @property
    def ok(self) -> bool:
        """Completed with ``[DONE]``, HTTP 200 and no failure."""
        return self.failure is None and not self.cancelled and self.end_ns is not None
