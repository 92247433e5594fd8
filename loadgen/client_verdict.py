"""What the stream client makes of a request's end, once per request (never per read).

- ``conclude``: a 200 stream whose reading ended — judged from what the parser kept
  (``[DONE]`` alone is no success: impossible usage, an empty stream, the sanity flags),
  or classified as an in-stream error, a body that held no SSE, a cut;
- ``read_error``: a response other than 200, its class and the server's message;
- ``classify``: the exception that ended a request (client-side errnos first, then
  timeouts, connects, cuts, invalid responses).

Every detail goes through the client's ``scrub`` (header values never appear in one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import aiohttp

from loadgen.client_errors import client_side, message_from_body, trunc
from loadgen.envelope import FailureClass, RequestResult
from loadgen.outcome import is_empty_stream, usage_problem
from loadgen.sanity import check
from loadgen.sse import SSEParser

__all__ = ["ERROR_BODY_MAX", "classify", "conclude", "read_error"]

ERROR_BODY_MAX: Final = 64 * 1024
"""Most bytes read from a non-200 response body (for its error message)."""

Scrub = Callable[[str], str]
"""The client's scrubber: header values (credentials) out of a detail, and cut."""


def conclude(
    resp: aiohttp.ClientResponse,
    r: RequestResult,
    parser: SSEParser,
    now: int,
    scrub: Scrub,
    *,
    sanity_checks: bool,
    ignore_eos: bool,
) -> bool:
    """Classify a stream whose reading ended; True if the body should be drained."""
    if parser.done:
        r.end_ns = now
        # Once per request, from what the parser kept: [DONE] alone is no success.
        problem = usage_problem(parser.usage, r.max_tokens)
        if problem is not None:
            r.failure = FailureClass.BAD_USAGE
            r.failure_detail = scrub(problem)
            r.prompt_tokens = r.output_tokens = None  # never in any token total
        elif is_empty_stream(r.chunks, r.finish_reason, r.output_tokens):
            r.failure = FailureClass.EMPTY_STREAM
            r.failure_detail = scrub(
                f"HTTP 200 stream reached [DONE] with no token-carrying chunk "
                f"({parser.events} events, finish_reason {r.finish_reason!r}, "
                f"usage.completion_tokens {r.output_tokens!r})"
            )
        elif sanity_checks:
            r.sanity = _sanity(r, parser, ignore_eos)
        return True
    if parser.failure is not None:
        r.failure = parser.failure
        r.failure_detail = scrub(parser.failure_detail or "")
        return parser.failure is FailureClass.ERROR_EVENT  # vLLM then sends [DONE]
    if parser.events == 0 and parser.head:
        r.failure = FailureClass.MALFORMED
        ctype = resp.headers.get("Content-Type", "?")
        r.failure_detail = scrub(
            f"HTTP 200 body held no SSE event (Content-Type {ctype}): {parser.head!r}"
        )
    else:
        r.failure = FailureClass.STREAM_CUT
        r.failure_detail = (
            f"stream ended before [DONE] after {parser.events} events, {r.chunks} token chunks"
        )
    return False


def _sanity(r: RequestResult, parser: SSEParser, ignore_eos: bool) -> tuple[str, ...]:
    """The sanity flags of a completed stream (once, at its end)."""
    text = parser.text
    facts = text.facts() if text is not None and parser.content_seen else None
    return check(
        facts,
        finish_reason=r.finish_reason,
        output_tokens=r.output_tokens if r.output_tokens is not None else r.chunks,
        max_tokens=r.max_tokens,
        ignore_eos=ignore_eos,
    )


async def read_error(resp: aiohttp.ClientResponse, r: RequestResult, scrub: Scrub) -> None:
    """A response other than 200: its failure class, and the server's message as detail."""
    status = resp.status
    r.failure = (
        FailureClass.HTTP_5XX
        if status >= 500
        else FailureClass.HTTP_4XX
        if status >= 400
        else FailureClass.MALFORMED  # 1xx/2xx/3xx other than 200: not a stream
    )
    try:
        body = await resp.content.read(ERROR_BODY_MAX)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        body = f"<error body unreadable: {type(exc).__name__}>".encode()
    r.failure_detail = scrub(f"HTTP {status}: {message_from_body(body)}")


def classify(
    exc: Exception, r: RequestResult, got_headers: bool, *, read_timeout_s: float, scrub: Scrub
) -> None:
    """The failure class and detail of the exception that ended a request."""
    name = type(exc).__name__
    failure: FailureClass
    ours = client_side(exc)
    if ours is not None:  # this host ran out of fds/buffers: not the server
        r.failure = FailureClass.CLIENT
        r.failure_detail = scrub(trunc(f"{ours}; {name}: {exc}"))
        return
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        failure = FailureClass.CONNECT
    elif isinstance(exc, TimeoutError):  # SocketTimeoutError (sock_read)
        r.failure = FailureClass.READ_TIMEOUT
        r.failure_detail = f"{name}: no bytes for {read_timeout_s:g} s"
        return
    elif isinstance(exc, aiohttp.ClientConnectorError):
        failure = FailureClass.CONNECT
    elif isinstance(exc, aiohttp.ClientPayloadError):
        failure = FailureClass.STREAM_CUT
    elif isinstance(exc, aiohttp.ClientResponseError):
        failure = FailureClass.MALFORMED  # the HTTP response itself was invalid
    elif isinstance(exc, aiohttp.InvalidURL):
        failure = FailureClass.CLIENT
    elif isinstance(exc, aiohttp.ClientError | ConnectionError | OSError):
        failure = FailureClass.STREAM_CUT if got_headers else FailureClass.CONNECT
    else:
        failure = FailureClass.CLIENT
    r.failure = failure
    r.failure_detail = scrub(trunc(f"{name}: {exc}"))
