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
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            self.reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
            for tc in delta.get("tool_calls") or []:
                self._add_tool_delta(tc)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]


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
