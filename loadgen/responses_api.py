"""The OpenAI Responses API's stream (``POST /v1/responses``, ``stream: true``), parsed into
the same facts as a chat stream (:class:`loadgen.sse.SSEParser`), so the client, the
verdict and the record treat both alike.

Events (``event: <type>`` then ``data: {"type": "<type>", ...}``; some servers send the data
line alone — the ``type`` field is what counts):

- ``response.output_text.delta``: visible text (as chat's ``delta.content``);
- ``response.reasoning_text.delta`` / ``response.reasoning.delta`` /
  ``response.reasoning_summary_text.delta``: reasoning (as chat's ``reasoning_content``:
  a token event, never visible content);
- ``response.output_item.added`` of a ``function_call`` item (the call's name, as chat's
  first tool-call chunk) and ``response.function_call_arguments.delta``: visible, merged
  into the tool-call collector in chat's delta shape;
- ``response.completed`` / ``response.incomplete`` (vLLM 0.32 sends ``completed`` with
  ``status: incomplete`` at the token limit: ``tests/fixtures/vllm_0.32_responses_stream.txt``,
  captured from it): the end (as ``[DONE]``), with
  ``usage {input_tokens, output_tokens}``, kept under chat's names (``prompt_tokens``,
  ``completion_tokens``, ``total_tokens``) so :mod:`loadgen.outcome` judges them as it
  judges chat's; ``finish_reason`` is ``stop``, ``tool_calls`` (a function call was
  streamed) or ``length`` (incomplete at ``max_output_tokens``);
- ``response.failed`` and ``error``: an error event (``error_event``), the server's
  message kept;
- any other type (``response.created``, ``response.in_progress``, ``…done``): no token.

So TTFT is the first token event (reasoning included, as on chat), first content the
first output-text or function-call event. Cost: every event is decoded (orjson, ~1 µs):
the Responses events carry a changing ``sequence_number``, so chat's byte template cannot
be learnt. A stream that ends without ``response.completed`` is cut, as a chat stream
without ``[DONE]``.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from loadgen.envelope import FailureClass
from loadgen.sanity import VisibleText
from loadgen.sse import NO_TOKEN, REASONING, VISIBLE, SSEParser
from loadgen.sse_detail import excerpt
from loadgen.tool_call_text import ToolCallText

__all__ = ["RESPONSES_PATH", "ResponsesParser", "chat_usage"]

RESPONSES_PATH: Final = "/v1/responses"
"""The endpoint path (a load URL ending in it is parsed here)."""

_TEXT_DELTA: Final = "response.output_text.delta"
_REASONING_DELTAS: Final = frozenset(
    {
        "response.reasoning_text.delta",
        "response.reasoning.delta",
        "response.reasoning_summary_text.delta",
    }
)
_ARGS_DELTA: Final = "response.function_call_arguments.delta"
_ITEM_ADDED: Final = "response.output_item.added"
_ENDS: Final = frozenset({"response.completed", "response.incomplete"})
_FAILS: Final = frozenset({"response.failed", "error"})


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def chat_usage(usage: object) -> object:
    """A Responses ``usage`` under chat's names (anything else is returned as sent, so
    that the verdict calls it what it is)."""
    if not isinstance(usage, dict):
        return usage
    out: dict[str, Any] = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
    }
    if "total_tokens" in usage:
        out["total_tokens"] = usage["total_tokens"]
    return out


def _failure_message(obj: dict[str, Any]) -> str:
    """The server's words for a ``response.failed`` or ``error`` event."""
    err = obj.get("error")
    if err is None and isinstance(obj.get("response"), dict):
        err = obj["response"].get("error")
    msg = err.get("message") if isinstance(err, dict) else obj.get("message")
    if isinstance(msg, str):
        return msg
    return f"{obj.get('type')}: {excerpt(orjson.dumps(obj))}"


class ResponsesParser(SSEParser):
    """An :class:`SSEParser` for the Responses API's events (see the module doc)."""

    __slots__ = ("_called",)

    def __init__(
        self,
        collect: bool = False,
        text: VisibleText | None = None,
        calls: ToolCallText | None = None,
    ) -> None:
        super().__init__(collect, text, calls)
        self._called = False  # a function call was streamed: finish_reason tool_calls

    def _payload(self, buf: bytes, ps: int, pe: int) -> int:
        """Classify one event's data by its ``type`` (decoded: see the module doc)."""
        self._value_at = -1  # never learn chat's byte template here
        if ps >= pe:
            return NO_TOKEN
        raw = buf if ps == 0 and pe == len(buf) else buf[ps:pe]
        stripped = raw.strip()
        if stripped == b"[DONE]":  # not in the API, but harmless: the end if it comes
            self.done = self.stopped = True
            return NO_TOKEN
        try:
            obj = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            self._fail(FailureClass.MALFORMED, f"invalid JSON in SSE data ({exc}): {excerpt(raw)}")
            return NO_TOKEN
        if not isinstance(obj, dict):
            self._fail(FailureClass.MALFORMED, f"SSE data is not a JSON object: {excerpt(raw)}")
            return NO_TOKEN
        kind = obj.get("type")
        if kind == _TEXT_DELTA:
            return self._visible_text(obj.get("delta"))
        if kind in _REASONING_DELTAS:
            return REASONING if obj.get("delta") else NO_TOKEN
        if kind == _ARGS_DELTA:
            return self._call_delta(obj, {"arguments": obj.get("delta")})
        if kind == _ITEM_ADDED:
            item = obj.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                fn = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
                return self._call_delta(obj, fn, item.get("call_id"))
            return NO_TOKEN
        if kind in _ENDS:
            self._end(obj)
        elif kind in _FAILS or ("error" in obj and kind is None):
            self._fail(FailureClass.ERROR_EVENT, _failure_message(obj))
        return NO_TOKEN

    def _visible_text(self, delta: object) -> int:
        if not isinstance(delta, str) or not delta:
            return NO_TOKEN
        self._keep_str(delta)
        return VISIBLE

    def _call_delta(self, obj: dict[str, Any], fn: dict[str, Any], call_id: object = None) -> int:
        """A function call's name or arguments, as chat's ``delta.tool_calls`` entry."""
        self._called = True
        if self.text is not None:
            self.text.tool_calls = True
        if self.calls is not None:
            index = _int(obj.get("output_index"))
            delta: dict[str, Any] = {"index": 0 if index is None else index, "function": fn}
            if call_id is not None:
                delta["id"] = call_id
                delta["type"] = "function"
            self.calls.add([delta])
        return VISIBLE

    def _end(self, obj: dict[str, Any]) -> None:
        """``response.completed`` / ``.incomplete``: usage, the finish, the end."""
        resp = obj.get("response")
        resp = resp if isinstance(resp, dict) else {}
        status = resp.get("status")
        if status in ("failed", "cancelled"):  # an end event, but no answer: never a success
            self._fail(FailureClass.ERROR_EVENT, f"response {status}: {_failure_message(obj)}")
            return
        usage = resp.get("usage")
        if usage is not None:
            self.usage = chat_usage(usage)
        if isinstance(usage, dict):
            self.prompt_tokens = _int(usage.get("input_tokens"))
            self.completion_tokens = _int(usage.get("output_tokens"))
        # vLLM 0.32 ends a truncated answer with response.completed, status incomplete.
        if obj.get("type") == "response.incomplete" or status == "incomplete":
            details = resp.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            if reason == "max_output_tokens":
                self.finish_reason = "length"
            else:  # the server's reason as sent (content_filter), or the status itself
                self.finish_reason = reason if isinstance(reason, str) else "incomplete"
        else:
            self.finish_reason = "tool_calls" if self._called else "stop"
        self.done = self.stopped = True
