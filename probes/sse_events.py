"""Assemble a whole chat-completions SSE stream: content, reasoning, tool calls, usage.

The load's parser (``loadgen.sse``) counts tokens without decoding; a probe needs the full
answer, so this decodes every event. Tool-call deltas are merged by ``index`` the way
OpenAI clients do: the first delta of an index carries ``id`` and ``function.name``, later
ones append to ``function.arguments``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class StreamAssembly:
    """Everything one stream said."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    """``data: [DONE]`` arrived."""
    error: str | None = None
    """An error object or ``event: error`` inside the 200 stream."""
    malformed: str | None = None
    """The first event that was not JSON."""
    _calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def tool_calls(self) -> list[dict[str, Any]]:
        """The assembled calls, in index order, shaped like a non-streamed message's."""
        return [self._calls[i] for i in sorted(self._calls)]

    def _add_tool_delta(self, delta: dict[str, Any]) -> None:
        idx = int(delta.get("index", 0))
        call = self._calls.setdefault(
            idx, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}}
        )
        if delta.get("id"):
            call["id"] = delta["id"]
        fn = delta.get("function") or {}
        if fn.get("name"):
            call["function"]["name"] = fn["name"]
        if fn.get("arguments"):
            call["function"]["arguments"] += fn["arguments"]

    def _add_event(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            self.malformed = self.malformed or f"event is not an object: {obj!r}"[:200]
            return
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = self.error or str(msg)[:300]
            return
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            self._bad(f"choices is {choices!r}")
            return
        for choice in choices:
            if not isinstance(choice, dict):
                self._bad(f"a choice is {choice!r}")
                return
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                self._bad(f"a delta is {delta!r}")
                return
            texts = [delta.get(k) for k in ("content", "reasoning", "reasoning_content")]
            if any(t is not None and not isinstance(t, str) for t in texts):
                self._bad(f"delta text is not a string: {delta!r}")
                return
            calls = delta.get("tool_calls") or []
            if not isinstance(calls, list) or not all(_tool_delta_ok(tc) for tc in calls):
                self._bad(f"tool_calls delta of the wrong shape: {calls!r}")
                return
            self.content += texts[0] or ""
            self.reasoning += texts[1] or texts[2] or ""
            for tc in calls:
                self._add_tool_delta(tc)
            if choice.get("finish_reason") is not None:
                self.finish_reason = str(choice["finish_reason"])

    def _bad(self, what: str) -> None:
        self.malformed = self.malformed or what[:200]


def _tool_delta_ok(tc: Any) -> bool:
    """A tool-call delta: an object with an integer index and string name/arguments."""
    if not isinstance(tc, dict):
        return False
    index = tc.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool):
        return False
    fn = tc.get("function") or {}
    return isinstance(fn, dict) and all(
        fn.get(k) is None or isinstance(fn.get(k), str) for k in ("name", "arguments")
    )


def parse_sse_events(text: str) -> StreamAssembly:
    """Decode a complete SSE body (any line endings) into a :class:`StreamAssembly`."""
    asm = StreamAssembly()
    norm = text.replace("\r\n", "\n").replace("\r", "\n")
    for block in norm.split("\n\n"):
        event = "message"
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        if not data:
            continue
        payload = "\n".join(data)
        if payload == "[DONE]":
            asm.done = True
            continue
        if event == "error":
            asm.error = asm.error or payload[:300]
            continue
        try:
            asm._add_event(orjson.loads(payload))
        except orjson.JSONDecodeError:
            asm.malformed = asm.malformed or f"not JSON: {payload[:120]!r}"
    return asm
