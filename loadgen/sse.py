"""Incremental Server-Sent-Events parser for OpenAI-compatible streaming responses.

Fed raw byte reads as they come off the socket (any split: an event across reads, several
events in one read, ``\\r\\n`` or ``\\r`` line endings, ``:`` comments, multi-line ``data:``),
it classifies each event and keeps the few facts the load generator needs:

- how many *token-carrying* events a read held (non-empty ``content``, ``reasoning``,
  ``reasoning_content``, ``text`` of ``/v1/completions``, or a ``tool_calls`` delta);
- whether *visible* content was seen (content, text or a tool-call delta — not reasoning);
- ``finish_reason`` and the ``usage`` token counts (never estimated), and the raw ``usage``
  value, which ``loadgen.outcome`` judges once at the stream's end;
- ``[DONE]``;
- only for a request that hands it a collector (a tool-call contract's), the tool-call
  deltas themselves, merged per index (:mod:`loadgen.tool_call_text`);
- a failure: an ``error`` object inside the 200 stream (``{"error":{...}}``, ``{"error":"..."}``
  or vLLM's older flat ``{"object":"error","message":...}``), an ``event: error`` SSE event,
  or malformed JSON/SSE.

Cost: a token chunk (compact JSON, one ``data:`` line) is classified by a handful of
``bytes.find``/``count`` calls on the read buffer, without slicing or JSON decoding. The
first such chunk also teaches the parser the stream's *template*: the bytes before and after
the token's string value, which vLLM repeats verbatim (id, created, model, tail). Every
later chunk that matches it costs three C calls (prefix, tail, "no quote in the value") —
measured ~0.5 µs per event, ~1 µs per one-event read. orjson runs only
where the bytes are not conclusive: any chunk containing ``"error"`` (so an error is never
missed, at worst decoded for nothing), ``"tool_calls"``, a non-null ``finish_reason`` or
``usage``, a payload that is not compact JSON (``"key": value`` with spaces, as some other
engines write), and events that are not a single ``data:`` line.

Memory: an unfinished event is held until its blank line, up to ``MAX_EVENT_BYTES``; past
that the stream is ``malformed_sse``. A hostile 200 whose event never ends (no newline, or
``data:`` lines without the blank line) keeps bytes coming, so the read watchdog never
fires: without the cap it would grow the buffer without limit and, since every read
re-copies and re-scans what is held, cost loop CPU quadratic in its length.
"""

from __future__ import annotations

from typing import Final

import orjson

from loadgen.envelope import FailureClass
from loadgen.sanity import COLLECT_MAX_BYTES, VisibleText, value_unit
from loadgen.sse_detail import BYTES_MAX, DETAIL_MAX, error_message, excerpt, trunc
from loadgen.tool_call_text import ToolCallText

# DETAIL_MAX and error_message live in loadgen.sse_detail; importable from here too.
__all__ = [
    "DETAIL_MAX",
    "MAX_EVENT_BYTES",
    "NO_TOKEN",
    "REASONING",
    "VISIBLE",
    "SSEParser",
    "error_message",
]

NO_TOKEN: Final = 0
"""Event carries no token (role-only chunk, finish/usage-only chunk, comment)."""
REASONING: Final = 1
"""Event carries reasoning tokens only (``reasoning`` / ``reasoning_content``)."""
VISIBLE: Final = 2
"""Event carries visible output: ``content``, ``text`` or a tool-call delta."""

MAX_EVENT_BYTES: Final = 1024 * 1024
"""Most bytes held for one unfinished SSE event (1 MiB); past it the stream is
``malformed_sse``. A real vLLM token event is under 2 KB; a final usage chunk or a large
tool-call delta stays far below this."""

# Patterns, pre-built once. A JSON string never contains an unescaped quote, so a quoted
# key pattern found in the payload is a real key (or, rarely, a value equal to the key's
# name: then we merely decode for nothing).
_ERROR: Final = b'"error"'
_TOOL_CALLS: Final = b'"tool_calls"'
_FINISH: Final = b'"finish_reason":'
_USAGE: Final = b'"usage":'
_NULL: Final = b"null"
_CONTENT: Final = b'"content":"'
_TEXT: Final = b'"text":"'
_REASONING: Final = b'"reasoning":"'
_REASONING_CONTENT: Final = b'"reasoning_content":"'
_DONE: Final = b"[DONE]"
_TOKEN_KEYS: Final = (
    (_CONTENT, VISIBLE),
    (_TEXT, VISIBLE),
    (_REASONING, REASONING),
    (_REASONING_CONTENT, REASONING),
)
_QUOTE: Final = 0x22
_COLON: Final = 0x3A
_LBRACE: Final = 0x7B
_RBRACE: Final = 0x7D
_NL: Final = 0x0A
_SPACE: Final = 0x20
_BACKSLASH: Final = 0x5C


class SSEParser:
    """Incremental SSE parser for one streamed response. Not reusable across responses.

    ``feed(data)`` returns the number of token-carrying events in ``data``; the caller
    timestamps the read once. After each feed, check ``stopped`` (``done`` or ``failure``):
    nothing after ``[DONE]`` or a failure is parsed. At end of stream call ``close()``.
    """

    __slots__ = (
        "_buf",
        "_cr",
        "_head",
        "_raw",
        "_tpl_kind",
        "_tpl_p",
        "_tpl_t",
        "_value_at",
        "_value_end",
        "calls",
        "completion_tokens",
        "content_seen",
        "done",
        "events",
        "failure",
        "failure_detail",
        "finish_reason",
        "prompt_tokens",
        "stopped",
        "text",
        "usage",
    )

    def __init__(
        self,
        collect: bool = False,
        text: VisibleText | None = None,
        calls: ToolCallText | None = None,
    ) -> None:
        self._buf = b""
        self._cr = False  # the previous read ended with "\r" (a "\r\n" may be split)
        self._head: bytes | None = None  # first bytes of the body, for a non-SSE detail
        # Template of this stream's token chunk: the event's bytes before and after the
        # token's string value (vLLM repeats id, created, model and the tail verbatim).
        self._tpl_p: bytes | None = None
        self._tpl_t = b""
        self._tpl_kind = NO_TOKEN
        self._value_at = -1  # set by _payload: span of a plain token value, for learning
        self._value_end = -1
        self.events = 0
        """``data`` events dispatched (including ``[DONE]``)."""
        self.content_seen = False
        """A visible-content event has been seen (content, text or a tool-call delta)."""
        self.done = False
        """``data: [DONE]`` was seen."""
        self.stopped = False
        """``done`` or ``failure``: parsing has ended."""
        self.failure: FailureClass | None = None
        self.failure_detail: str | None = None
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.usage: object = None
        """The last non-null ``usage`` value as sent (judged once, at the stream's end)."""
        self.text: VisibleText | None = (
            text if text is not None else VisibleText() if collect else None
        )
        """The visible text, bounded, for the sanity checks (``collect``; see
        :mod:`loadgen.sanity`), or the caller's ``text`` (a conversation's answer,
        :mod:`loadgen.answer_text`), which also serves the checks."""
        self._raw = self.text.raw if self.text is not None else None
        self.calls = calls
        """The tool-call deltas, merged (:mod:`loadgen.tool_call_text`): only for a request
        whose answer contract checks its tool calls; None for every other request."""

    # ------------------------------------------------------------------ feeding

    def feed(self, data: bytes) -> int:
        """Parse one read; return how many token-carrying events it completed."""
        if self.stopped or not data:
            return 0
        tpl_p = self._tpl_p
        if tpl_p is not None and not self._buf:
            # The paced case: exactly one template event in this read (see module doc).
            tpl_t = self._tpl_t
            if data.startswith(tpl_p) and data.endswith(tpl_t):
                a = len(tpl_p)
                e = len(data) - len(tpl_t)
                if e > a and data.find(b'"', a, e) < 0 and data[e - 1] != _BACKSLASH:
                    self.events += 1
                    if self._tpl_kind == VISIBLE:
                        self.content_seen = True
                        raw = self._raw
                        if raw is not None:  # the value and its closing quote
                            raw += data[a : e + 1]
                            if len(raw) > COLLECT_MAX_BYTES:
                                self._spill()
                    return 1
        return self._scan(data, tpl_p)

    def _scan(self, data: bytes, tpl_p: bytes | None) -> int:
        """Any other read: events split across reads, several per read, any framing."""
        if self._head is None:
            self._head = data[:BYTES_MAX]
        if self._cr:  # "\r" | "\n" split across reads: the "\n" was already a line end
            self._cr = False
            if data[0] == _NL:
                data = data[1:]
        if b"\r" in data:
            self._cr = data[-1] == 0x0D
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        find = buf.find
        startswith = buf.startswith
        blen = len(buf)
        start = 0
        tokens = 0
        tpl_t = self._tpl_t
        while start < blen:
            if tpl_p is not None and startswith(tpl_p, start):
                # Template path: this stream's last token chunk with another string value.
                # Nothing but the value may differ: it must hold no quote (a quote would
                # mean different keys), and must not end in a backslash (escaped quote).
                a = start + len(tpl_p)
                e = find(tpl_t, a)
                if e > a and find(b'"', a, e) < 0 and buf[e - 1] != _BACKSLASH:
                    self.events += 1
                    tokens += 1
                    if self._tpl_kind == VISIBLE:
                        self.content_seen = True
                        raw = self._raw
                        if raw is not None:  # the value and its closing quote
                            raw += buf[a : e + 1]
                            if len(raw) > COLLECT_MAX_BYTES:
                                self._spill()
                    start = e + len(tpl_t)
                    continue
            nl = find(b"\n", start)
            if nl < 0 or nl + 1 >= blen:
                break  # no complete line, or can't yet tell whether the event ends here
            if buf[nl + 1] == _NL and startswith(b"data:", start):
                # One `data:` line, then the blank line (every vLLM event).
                ps = start + 5
                if ps < nl and buf[ps] == _SPACE:
                    ps += 1
                self.events += 1
                kind = self._payload(buf, ps, nl)
                if kind and self._value_at >= 0:  # learn the template from this event
                    tpl_p = self._tpl_p = buf[start : self._value_at]
                    tpl_t = self._tpl_t = buf[self._value_end : nl + 2]
                    self._tpl_kind = kind
                start = nl + 2
            else:
                end = find(b"\n\n", start)
                if end < 0:
                    break
                kind = self._block(buf[start:end])
                start = end + 2
            if kind:
                tokens += 1
                if kind == VISIBLE:
                    self.content_seen = True
            if self.stopped:
                self._buf = b""
                return tokens
        rest = self._buf = buf[start:] if start else buf
        if len(rest) > MAX_EVENT_BYTES:  # the one check on this path (see module doc)
            self._overflow(rest)
        return tokens

    def _overflow(self, rest: bytes) -> None:
        """An unfinished event past ``MAX_EVENT_BYTES``: the stream is malformed."""
        self._buf = b""
        self._fail(
            FailureClass.MALFORMED,
            f"an SSE event grew past {MAX_EVENT_BYTES // (1024 * 1024)} MiB without its "
            f"end (blank line): {excerpt(rest)}",
        )

    def close(self) -> int:
        """End of stream. Dispatch a last event that lacks its blank line (lenient: only
        when it ends with a complete line); a partial line is dropped — the caller sees
        ``done`` still False and classifies the cut. Returns token events dispatched."""
        if self.stopped or not self._buf:
            return 0
        rest, self._buf = self._buf, b""
        if not rest.endswith(b"\n"):
            return 0
        kind = self._block(rest.rstrip(b"\n"))
        if kind == VISIBLE:
            self.content_seen = True
        return 1 if kind else 0

    @property
    def head(self) -> bytes:
        """The first bytes of the body (for "not an SSE stream" details)."""
        return self._head or b""

    # ------------------------------------------------------------------ events

    def _block(self, block: bytes) -> int:
        """General SSE event: several lines, comments, ``event:``/``id:``/``retry:`` fields."""
        data_lines: list[bytes] = []
        event = b""
        for line in block.split(b"\n"):
            if not line or line[0] == _COLON:
                continue  # blank or comment (keep-alive pings)
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data_lines.append(value)
            elif name == b"event":
                event = value.strip()
            # id, retry and unknown fields are ignored, as the SSE spec says
        if not data_lines:
            return NO_TOKEN
        self.events += 1
        payload = data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines)
        if event == b"error":
            try:
                msg = error_message(orjson.loads(payload))
            except orjson.JSONDecodeError:
                msg = None
            self._fail(
                FailureClass.ERROR_EVENT,
                msg or trunc("event: error: " + payload.decode(errors="replace")),
            )
            return NO_TOKEN
        return self._payload(payload, 0, len(payload))

    def _payload(self, buf: bytes, ps: int, pe: int) -> int:
        """Classify the data payload ``buf[ps:pe]`` — by bytes where that is conclusive."""
        self._value_at = -1
        if ps >= pe:
            return NO_TOKEN  # `data:` with nothing: not an event we care about
        find = buf.find
        # Fast path only for `{"...}` payloads (a cheap guard against truncated JSON too).
        if (
            pe - ps < 8
            or buf[ps] != _LBRACE
            or buf[ps + 1] != _QUOTE
            or buf[pe - 1] != _RBRACE
            or find(_ERROR, ps, pe) >= 0
            or find(_TOOL_CALLS, ps, pe) >= 0
        ):
            return self._slow(buf, ps, pe)
        # Compact JSON? The first key's closing quote must be followed by ':' and no space.
        q = find(b'"', ps + 2, pe)
        if q < 0 or q + 2 >= pe or buf[q + 1] != _COLON or buf[q + 2] == _SPACE:
            return self._slow(buf, ps, pe)
        # Balanced brackets: truncated or garbled JSON gets decoded (and so classified).
        # Brackets inside strings may unbalance the count: then we only decode for nothing.
        count = buf.count
        if count(b"{", ps, pe) != count(b"}", ps, pe) or count(b"[", ps, pe) != count(b"]", ps, pe):
            return self._slow(buf, ps, pe)
        i = find(_FINISH, ps, pe)
        if i >= 0 and not buf.startswith(_NULL, i + 16):
            return self._slow(buf, ps, pe)
        i = find(_USAGE, ps, pe)
        if i >= 0 and not buf.startswith(_NULL, i + 8):
            return self._slow(buf, ps, pe)
        # Token? A key pattern ending in an opening quote, whose value is not "".
        for pat, kind in _TOKEN_KEYS:
            n = len(pat)
            i = find(pat, ps, pe)
            while i >= 0:
                v = i + n
                if v < pe and buf[v] != _QUOTE:
                    # A template can be learnt when the value is plain (no escapes).
                    j = find(b'"', v, pe)
                    if j > v and find(b"\\", v, j) < 0:
                        self._value_at = v
                        self._value_end = j
                        if kind == VISIBLE and self._raw is not None:
                            self._keep(buf[v : j + 1])
                    elif kind == VISIBLE and self._raw is not None:
                        self._keep_escaped(buf, v, j, pe)
                    return kind
                i = find(pat, v, pe)  # "" (role chunk) — another choice may differ
        return NO_TOKEN

    # ------------------------------------------------------------------ visible text

    def _keep(self, unit: bytes) -> None:
        """Collect one unit (a value's raw bytes and a closing quote), bounded."""
        raw = self._raw
        if raw is not None:
            raw += unit
            if len(raw) > COLLECT_MAX_BYTES:
                self._spill()

    def _keep_escaped(self, buf: bytes, v: int, j: int, pe: int) -> None:
        """Collect the value at ``buf[v:]`` that holds escapes: its end is the first quote
        after ``v`` not escaped (an odd run of backslashes before it escapes it)."""
        while j >= 0:
            k = j
            while buf[k - 1] == _BACKSLASH:
                k -= 1
            if (j - k) % 2 == 0:
                self._keep(value_unit(buf[v:j]))
                return
            j = buf.find(b'"', j + 1, pe)

    def _keep_str(self, value: object) -> None:
        """Collect a decoded value (the slow path) as its JSON string body."""
        if self._raw is not None and isinstance(value, str) and value:
            self._keep(value_unit(orjson.dumps(value)[1:-1]))

    def _spill(self) -> None:
        if self.text is not None:
            self.text.spill()

    def _slow(self, buf: bytes, ps: int, pe: int) -> int:
        """Decode the payload with orjson and classify it fully."""
        raw = buf if ps == 0 and pe == len(buf) else buf[ps:pe]
        stripped = raw.strip()
        if stripped == _DONE:
            self.done = True
            self.stopped = True
            return NO_TOKEN
        try:
            obj = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            self._fail(FailureClass.MALFORMED, f"invalid JSON in SSE data ({exc}): {excerpt(raw)}")
            return NO_TOKEN
        if not isinstance(obj, dict):
            self._fail(FailureClass.MALFORMED, f"SSE data is not a JSON object: {excerpt(raw)}")
            return NO_TOKEN
        msg = error_message(obj) if ("error" in obj or obj.get("object") == "error") else None
        if msg is not None:
            self._fail(FailureClass.ERROR_EVENT, msg)
            return NO_TOKEN
        kind = NO_TOKEN
        choices = obj.get("choices")
        if isinstance(choices, list):
            for ch in choices:
                if not isinstance(ch, dict):
                    continue
                fr = ch.get("finish_reason")
                if fr is not None:
                    self.finish_reason = str(fr)
                if ch.get("text"):
                    kind = VISIBLE
                    self._keep_str(ch["text"])
                delta = ch.get("delta")
                if isinstance(delta, dict):
                    tool_calls = delta.get("tool_calls")
                    if delta.get("content") or tool_calls:
                        kind = VISIBLE
                        self._keep_str(delta.get("content"))
                        if tool_calls:
                            if self.text is not None:
                                self.text.tool_calls = True
                            if self.calls is not None:  # a tool-call contract's request only
                                self.calls.add(tool_calls)
                    elif kind == NO_TOKEN and (
                        delta.get("reasoning") or delta.get("reasoning_content")
                    ):
                        kind = REASONING
        usage = obj.get("usage")
        if usage is not None:
            self.usage = usage
        if isinstance(usage, dict):
            pt = usage.get("prompt_tokens")
            ct = usage.get("completion_tokens")
            if isinstance(pt, int) and not isinstance(pt, bool):
                self.prompt_tokens = pt
            if isinstance(ct, int) and not isinstance(ct, bool):
                self.completion_tokens = ct
        return kind

    def _fail(self, failure: FailureClass, detail: str) -> None:
        self.failure = failure
        self.failure_detail = trunc(detail)
        self.stopped = True
