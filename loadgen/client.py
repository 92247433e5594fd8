"""The streaming hot path: one POST, one SSE stream, one filled-in ``RequestResult``.

aiohttp carries it (its C HTTP parser; plain httpx fell behind at 256 paced streams, see
``CLIENT_COST.md``). One ``StreamClient`` — one ``aiohttp.ClientSession`` and connection
pool — per process. Per read of the socket the loop takes one ``perf_counter_ns()`` and
hands the bytes to ``SSEParser``; nothing is logged and nothing allocated per chunk beyond
the ITL entry.
Once every 32 token events it also asks the socket how many bytes already wait behind the
chunk (:mod:`loadgen.read_health`): a client behind the server's writes finds them there.

Two costs of the stock stack are avoided, both measured (bench/client_cost.py): asyncio's
256 KiB ``recv`` per read (see ``client_conn.READ_SIZE``), and aiohttp's ``sock_read`` timer, which
cancels and re-arms a loop timer on every read (~3 µs per token). ``sock_read`` guards only
the wait for the response headers; during the body a single watchdog task per client
scans the open streams (their last-read stamps, which the loop takes anyway) and closes
any stream silent for longer than ``read_timeout_s`` (detected within
``read_timeout_s`` + ``min(1 s, read_timeout_s / 4)``).

``stream``/``stream_into`` never raise except ``asyncio.CancelledError`` (the runner cancels
at its drain deadline): every other outcome is a ``FailureClass`` on the result. A stream
that reached ``[DONE]`` is judged once at its end (``loadgen.outcome``): impossible usage
and an empty stream are failures, never successes. A completed one is checked for sanity
(``loadgen.sanity``: empty, runaway whitespace, repetition, an unasked finish reason) from
the visible text the parser kept, bounded; the flags go on ``RequestResult.sanity``.
A conversation's turn gets that text back too, bounded (:mod:`loadgen.answer_text`), and
a mix's class with an answer contract is checked on it (:mod:`loadgen.answer_contract`).

Stale pooled connections. A server without keep-alive that does not say so (no
``Connection: close``), or one whose keep-alive timeout ran out while the connection sat
in the pool, closes a connection the pool still holds; the next request written to it
fails at once (``ServerDisconnectedError``, a reset, "Can not write request body"). Such
a request is resent once, on a fresh connection, when all of these hold: the connection
was *reused* from the pool (aiohttp's ``on_connection_reuseconn`` trace signal), no byte of
a response arrived (no headers), and the error is a disconnect or reset on that socket —
not a timeout, not a failed connect. That the server never processed it is an inference
(in the race it closed before reading the request; RFC 9112 §9.3.1 lets a client resend
when it can tell, as browsers do), not a proof — a server that read it and died without a
byte of answer looks the same. So it is counted: ``RequestResult.stale_retry`` goes to the
journal and the record (``load.stale_connection_retries``), and the timings are those of
the resend, on a session without a pool (so that it cannot meet another stale
connection). A request that fails again is classified as any other.

Authorization (or any header given to the client) is never logged nor stored; failure
details are scrubbed of header values. What tells failures apart (client-side errnos, a
stale pooled connection, a server's error message) is :mod:`loadgen.client_errors`; how a
request's end is classified with them (a stream's conclusion, a non-200, an exception) is
:mod:`loadgen.client_verdict`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping
from time import perf_counter_ns
from types import TracebackType
from typing import Any, Final

import aiohttp

from loadgen.answer_contract import AnswerContract
from loadgen.answer_text import AnswerText
from loadgen.client_conn import resend_after, tune_connection
from loadgen.client_errors import message_from_body, trunc
from loadgen.client_verdict import ERROR_BODY_MAX, classify, conclude, read_error
from loadgen.envelope import FailureClass, RequestResult
from loadgen.read_health import (
    FIRST_SAMPLE,
    NOT_SAMPLED,
    PROCESS_TALLY,
    SAMPLE_EVERY,
    QueueProbe,
    ReadTally,
    queue_probe,
)
from loadgen.responses_api import RESPONSES_PATH, ResponsesParser
from loadgen.sse import SSEParser
from loadgen.tls import TlsFiles, aiohttp_ssl
from loadgen.tls import context as tls_context

__all__ = ["StreamClient"]

DRAIN_AFTER_DONE_S: Final = 2.0
"""After ``[DONE]``, wait at most this long for the end of the HTTP body, so the connection
goes back to the pool; past it the connection is closed (the result is already final)."""


async def _on_reuse(_session: object, ctx: Any, _params: object) -> None:
    """aiohttp trace hook: this request's connection came from the pool."""
    attempt = ctx.trace_request_ctx
    if isinstance(attempt, dict):
        attempt["reused"] = True


def _sample_queue(probe: QueueProbe | None, r: RequestResult, tally: ReadTally) -> None:
    """One sample of the stream's receive queue onto its result and the client's tally
    (once every SAMPLE_EVERY token events; a socket released, closed or failing under the
    stream gives none; None, a socket that cannot be asked, is never sampled: its countdown
    starts at NOT_SAMPLED)."""
    queued = probe.queued() if probe is not None else -1
    if queued < 0:
        return
    r.queue_samples += 1
    tally.samples += 1
    if queued:
        r.queue_hits += 1
        tally.hits += 1
        if queued > r.queued_bytes_max:
            r.queued_bytes_max = queued


class _Watch:
    """One open stream, as the read-timeout watchdog sees it."""

    __slots__ = ("expired", "last_ns", "resp")

    def __init__(self, last_ns: int, resp: aiohttp.ClientResponse) -> None:
        self.last_ns = last_ns
        self.resp = resp
        self.expired = False


class StreamClient:
    """Streams OpenAI-compatible completions over one aiohttp session (one per process).

    ``max_connections`` must be ≥ the concurrency driven through this client: a request
    waiting for a free pooled connection would count that wait as connect time.
    """

    def __init__(
        self,
        *,
        max_connections: int,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 300.0,
        headers: Mapping[str, str] | None = None,
        sanity_checks: bool = True,
        ignore_eos: bool = False,
        contracts: Mapping[str, AnswerContract] | None = None,
        sample_queue: bool = True,
        read_tally: ReadTally | None = None,
        tls: Mapping[str, str | None] | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.sanity_checks = sanity_checks
        """Check every completed response (:mod:`loadgen.sanity`): ``RequestResult.sanity``."""
        self.ignore_eos = ignore_eos
        """The requests send ``ignore_eos``: an early ``length`` is then no sanity flag."""
        self.sample_queue = sample_queue
        """Sample each stream's socket receive queue (:mod:`loadgen.read_health`); off
        only to measure what the sampling costs (``bench/client_behind.py``)."""
        self.read_tally = read_tally if read_tally is not None else PROCESS_TALLY
        """Every stream's samples as they are taken (the live behind share)."""
        self._contracts: dict[str | None, AnswerContract] = dict((contracts or {}).items())
        self._headers = dict(headers or {})
        # Values never to appear in a failure detail: each header value, and its parts
        # ("Bearer sk-…" → also "sk-…"), longest first.
        parts = {v for v in self._headers.values() if len(v) >= 4}
        parts |= {p for v in self._headers.values() for p in v.split() if len(p) >= 8}
        self._secrets = tuple(sorted(parts, key=len, reverse=True))
        # TLS: this client's own files (a shard's spec), else the process's (loadgen.tls).
        self._ssl = tls_context(TlsFiles(**tls)) if tls else None
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # no pool: for resends only
        self._watched: set[_Watch] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def __repr__(self) -> str:  # no headers: they may hold credentials
        return f"StreamClient(max_connections={self.max_connections})"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> StreamClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the session (idempotent). Must run inside the event loop that streams."""
        if self._session is not None:
            return
        ssl = self._ssl or aiohttp_ssl()
        connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            limit_per_host=0,
            keepalive_timeout=60.0,
            force_close=False,
            ssl=ssl,
        )
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.connect_timeout_s,
            sock_connect=self.connect_timeout_s,
            sock_read=self.read_timeout_s,
        )
        headers = {"Accept-Encoding": "identity", **self._headers}
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_on_reuse)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            headers=headers,
            auto_decompress=False,
            raise_for_status=False,
            trace_configs=[trace],
        )
        # A resend must not land on another stale pooled connection: a session without a
        # pool (each request on its own new connection, closed after it).
        self._fresh = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, force_close=True, ssl=ssl
            ),
            timeout=timeout,
            headers=headers,
            auto_decompress=False,
            raise_for_status=False,
        )
        self._watchdog = asyncio.create_task(self._watch_loop(), name="soaktop-read-watchdog")

    async def close(self) -> None:
        if self._watchdog is not None:
            watchdog, self._watchdog = self._watchdog, None
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        if self._fresh is not None:
            fresh, self._fresh = self._fresh, None
            await fresh.close()

    async def _watch_loop(self) -> None:
        """Close streams that received nothing for ``read_timeout_s`` (see module doc)."""
        limit_ns = int(self.read_timeout_s * 1e9)
        period = min(1.0, self.read_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            now = perf_counter_ns()
            for w in tuple(self._watched):
                if not w.expired and now - w.last_ns > limit_ns:
                    w.expired = True
                    # The pending read raises; stream_into classifies it as read_timeout.
                    with contextlib.suppress(Exception):  # the watchdog must outlive any one
                        w.resp.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("StreamClient is not started (use `async with`)")
        return self._session

    # ------------------------------------------------------------------ control

    async def warm_connection(self, url: str, *, timeout_s: float | None = None) -> None:
        """GET ``url`` (e.g. ``base/v1/models``) through the pool; raise on any failure.

        Used by the worker barrier: each worker proves it can open a connection.
        Raises ``ConnectionError`` with a scrubbed message (status and server message).
        """
        t = timeout_s if timeout_s is not None else self.connect_timeout_s + 30.0
        try:
            async with self.session.get(
                url, timeout=aiohttp.ClientTimeout(total=t), allow_redirects=False
            ) as resp:
                status = resp.status
                body = await resp.content.read(ERROR_BODY_MAX)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ConnectionError(self._scrub(f"GET {url}: {type(exc).__name__}: {exc}")) from None
        if not 200 <= status < 300:
            msg = message_from_body(body)
            raise ConnectionError(self._scrub(f"GET {url}: HTTP {status}: {msg}"))

    # ------------------------------------------------------------------ hot path

    def stream(
        self, url: str, body: bytes, *, request_id: str, worker: int, prompt_id: int
    ) -> Coroutine[Any, Any, RequestResult]:
        """POST ``body`` (prebuilt JSON with ``"stream": true``) and measure the stream.

        Use as ``result = await client.stream(...)``. A plain function returning
        ``stream_into``'s coroutine: one coroutine level less for every read to resume.
        """
        result = RequestResult(request_id=request_id, worker=worker, prompt_id=prompt_id, sent_ns=0)
        return self.stream_into(result, url, body)

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        """Like ``stream``, filling a caller-held ``result`` in place (and returning it).

        On cancellation the caller still holds the partial measurements; ``cancelled`` is
        set on it and ``CancelledError`` re-raised.
        """
        got_headers = False
        watch: _Watch | None = None
        attempt = {"reused": False}  # set by the trace hook when the pool hands a connection
        try:
            session = self.session
            headers = {"Content-Type": "application/json", "X-Request-Id": result.request_id}
            while True:  # at most twice: a resend after a stale pooled connection (module doc)
                result.sent_ns = perf_counter_ns()
                try:
                    async with session.post(
                        url,
                        data=body,
                        headers=headers,
                        allow_redirects=False,
                        trace_request_ctx=attempt,
                    ) as resp:
                        now = result.first_byte_ns = perf_counter_ns()
                        got_headers = True
                        status = result.status = resp.status
                        if status != 200:
                            await read_error(resp, result, self._scrub)
                            return result
                        watch = self._watch(resp, now)
                        contract, answer, parser = self._parser_for(result, url)
                        # The read loop, inline: every await level costs each read a resume.
                        feed = parser.feed
                        readany = resp.content.readany
                        clock = perf_counter_ns
                        itl = result.itl_ns
                        append = itl.append
                        last = 0
                        chunks = 0
                        coalesced = 0
                        want_content = True
                        probe, left, tally = self._queue_sampling(resp)
                        try:
                            while True:
                                data = await readany()
                                now = watch.last_ns = clock()
                                # At EOF a last event may lack its blank line: close() does it.
                                n = feed(data) if data else parser.close()
                                if n:
                                    if last:
                                        append(now - last)
                                    else:
                                        result.first_token_ns = now
                                    if n > 1:  # events that shared this read: gaps of 0
                                        itl.extend([0] * (n - 1))
                                        coalesced += n - 1
                                    last = now
                                    chunks += n
                                    left -= n
                                    if left <= 0:
                                        left = SAMPLE_EVERY
                                        _sample_queue(probe, result, tally)
                                    if want_content and parser.content_seen:
                                        result.first_content_ns = now
                                        want_content = False
                                if parser.stopped or not data:
                                    break
                        finally:  # also when a read fails or is cancelled: keep the measures
                            self._read_ended(watch, result, parser, chunks, coalesced)
                        await self._after_stream(resp, result, parser, now, contract, answer)
                    return result
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    if not resend_after(exc, result, attempt["reused"], got_headers):
                        raise
                    session = self._fresh or session
        except asyncio.CancelledError:
            result.cancelled = True
            raise
        except Exception as exc:
            self._failed(exc, result, got_headers, watch)
        return result

    def _parser_for(
        self, result: RequestResult, url: str
    ) -> tuple[AnswerContract | None, AnswerText | None, SSEParser]:
        """A mix class's answer contract, the answer's text kept for it or for a
        conversation's next turn (None, None: a plain request keeps no text), and the
        stream's parser (collecting the tool calls a contract checks): the Responses
        API's for a ``/v1/responses`` URL (:mod:`loadgen.responses_api`)."""
        contract = self._contracts.get(result.workload_class)
        answer = AnswerText() if result.turn is not None or contract else None
        calls = contract.collector() if contract is not None else None
        kind = ResponsesParser if url.endswith(RESPONSES_PATH) else SSEParser
        return contract, answer, kind(self.sanity_checks, answer, calls)

    def _queue_sampling(
        self, resp: aiohttp.ClientResponse
    ) -> tuple[QueueProbe | None, int, ReadTally]:
        """The receive queue, sampled (loadgen.read_health): the stream's probe, its
        countdown of token events (a socket that cannot be asked never reaches 0), and
        the tally the samples go to."""
        probe = queue_probe(resp) if self.sample_queue else None
        left = FIRST_SAMPLE if probe is not None else NOT_SAMPLED
        return probe, left, self.read_tally

    def _read_ended(
        self, watch: _Watch, r: RequestResult, parser: SSEParser, chunks: int, coalesced: int
    ) -> None:
        """The read loop ended (done, failed or cancelled): the stream leaves the watchdog,
        and its measures and the parser's counts go on the result."""
        self._watched.discard(watch)
        r.chunks = chunks
        r.coalesced = coalesced
        r.finish_reason = parser.finish_reason
        r.prompt_tokens = parser.prompt_tokens
        r.output_tokens = parser.completion_tokens

    async def _after_stream(
        self,
        resp: aiohttp.ClientResponse,
        result: RequestResult,
        parser: SSEParser,
        now: int,
        contract: AnswerContract | None,
        answer: AnswerText | None,
    ) -> None:
        """After the stream: its conclusion (:mod:`loadgen.client_verdict`), the body
        drained when the connection can be reused, the contract judged on a completed
        answer, a turn's answer handed back (the next turn's history)."""
        concluded = conclude(
            resp,
            result,
            parser,
            now,
            self._scrub,
            sanity_checks=self.sanity_checks,
            ignore_eos=self.ignore_eos,
        )
        if concluded:
            await self._drain(resp)
        if contract is not None and result.ok:
            contract.judge(result, parser.text, self._scrub, parser.calls)
        if answer is not None:
            answer.hand_back(result)

    def _watch(self, resp: aiohttp.ClientResponse, now: int) -> _Watch:
        """The stream's entry for the read watchdog, watched once its connection is tuned."""
        watch = _Watch(now, resp)
        if tune_connection(resp):  # else aiohttp's sock_read stays in charge
            self._watched.add(watch)
        return watch

    def _failed(
        self, exc: Exception, r: RequestResult, got_headers: bool, watch: _Watch | None
    ) -> None:
        """Classify the exception that ended a request; a stream the watchdog closed is a
        read timeout, whatever the read then raised."""
        if watch is not None and watch.expired:
            r.failure = FailureClass.READ_TIMEOUT
            r.failure_detail = f"no bytes for {self.read_timeout_s:g} s (watchdog)"
        else:
            classify(exc, r, got_headers, read_timeout_s=self.read_timeout_s, scrub=self._scrub)

    @staticmethod
    async def _drain(resp: aiohttp.ClientResponse) -> None:
        """Read the rest of the body (normally just the chunked terminator) so that the
        connection can be reused; bounded, errors ignored."""
        content = resp.content
        if content.is_eof():
            return
        try:
            async with asyncio.timeout(DRAIN_AFTER_DONE_S):
                while await content.readany():
                    pass
        except (TimeoutError, aiohttp.ClientError, OSError):
            resp.close()

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return trunc(text)
