"""A tool-call answer's calls, assembled from the stream's deltas, bounded.

A mix's class whose contract is a tool call (:mod:`loadgen.answer_contract`) is checked on
the calls themselves: the function named and its ``arguments``. OpenAI-style streams send
a call in pieces, merged by ``index`` the way OpenAI clients (and the gates'
:mod:`probes.sse_events`) do: the first delta of an index carries ``id`` and
``function.name``, later ones append to ``function.arguments``; two parallel calls
interleave their indices. The SSE parser hands each decoded ``tool_calls`` list to a
:class:`ToolCallText` — one the client makes only for a request of such a class, so no
other request pays anything (every ``tool_calls`` chunk is decoded by orjson anyway).

Bounds: at most :data:`TOOL_CALLS_MAX_BYTES` of arguments (UTF-8 bytes), ids and names
(characters) in all, and at most :data:`MAX_CALLS` distinct indices. Past either the
collector stops keeping and the answer is marked ``truncated``: the contract then fails
it as "too long to check", never a silent pass. A delta of the wrong shape (not an
object, an index that is no integer, a ``function`` that is no object, a name or
arguments that are no string) makes the calls unreadable: the first such problem is kept
(``broken``), nothing after it is, and the contract fails on it. Nothing a server sends
here raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from loadgen.answer_text import ANSWER_MAX_BYTES

__all__ = ["MAX_CALLS", "TOOL_CALLS_MAX_BYTES", "ToolCall", "ToolCallText"]

TOOL_CALLS_MAX_BYTES: Final = ANSWER_MAX_BYTES
"""Most bytes of arguments, ids and names kept for one answer's calls (64 KiB)."""
MAX_CALLS: Final = 64
"""Most distinct tool-call indices kept for one answer (a stream of thousands is hostile)."""
_SHOWN: Final = 60
"""Longest excerpt of an unreadable delta kept in its problem (characters of its repr)."""


@dataclass(frozen=True)
class ToolCall:
    """One assembled call, as the contract checks it."""

    index: int
    id: str | None
    name: str | None
    arguments: str


class _Pending:
    """One index's call while the stream runs (arguments as bytes: cheap appends)."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments = bytearray()


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


class ToolCallText:
    """The tool calls of one streamed answer, merged per ``index`` (module docstring)."""

    __slots__ = ("_calls", "_size", "broken", "truncated")

    def __init__(self) -> None:
        self._calls: dict[int, _Pending] = {}
        self._size = 0
        self.broken: str | None = None
        """The first delta that made the calls unreadable, in words (None: all readable)."""
        self.truncated = False
        """The calls ran past a bound: what is kept is not the whole answer."""

    def add(self, deltas: object) -> None:
        """Merge one chunk's ``delta.tool_calls`` value (as decoded; any shape)."""
        if self.broken is not None or self.truncated:
            return  # the answer already fails: keep nothing more
        if not isinstance(deltas, list):
            self.broken = f"tool_calls delta is {type(deltas).__name__}, not a list"
            return
        for delta in deltas:
            if not isinstance(delta, dict):
                self.broken = f"a tool-call delta is not an object: {_shown(delta)}"
                return
            if not self._merge(delta):
                return

    def _merge(self, delta: dict[str, object]) -> bool:
        """One delta into its index's call; False when the answer stops being kept."""
        index = delta.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool):
            self.broken = f"a tool-call delta's index is {_shown(index)}, not an integer"
            return False
        fn = delta.get("function")
        if fn is None:
            fn = {}
        if not isinstance(fn, dict):
            self.broken = f"tool call {index}: function is {_shown(fn)}, not an object"
            return False
        call_id = self._string(index, "id", delta.get("id"))
        name = self._string(index, "function name", fn.get("name"))
        args = self._string(index, "arguments", fn.get("arguments"))
        if self.broken is not None:
            return False
        call = self._calls.get(index)
        if call is None:
            if len(self._calls) >= MAX_CALLS:
                self.truncated = True
                return False
            call = self._calls[index] = _Pending()
        added = b""
        if args:
            added = args.encode("utf-8", "surrogatepass")
        grow = len(added) + len(name or "") + len(call_id or "")
        self._size += grow
        if self._size > TOOL_CALLS_MAX_BYTES:
            self.truncated = True
            return False
        # As the gates merge: a non-empty id or name is (re)set, arguments are appended.
        if call_id:
            call.id = call_id
        if name:
            call.name = name
        if added:
            call.arguments += added
        return True

    def _string(self, index: int, what: str, value: object) -> str | None:
        """``value`` when it is a string (None when absent); else the answer is broken."""
        if value is None or isinstance(value, str):
            return value
        if self.broken is None:
            self.broken = f"tool call {index}: {what} is {type(value).__name__}, not a string"
        return None

    def calls(self) -> list[ToolCall]:
        """The assembled calls in index order (their arguments decoded once, here)."""
        return [
            ToolCall(i, c.id, c.name, c.arguments.decode("utf-8", "surrogatepass"))
            for i, c in sorted(self._calls.items())
        ]
