"""Scrubbing a kept SSE stream on the text its chunks assemble to, not chunk by chunk.

A server that echoes the API key as two content deltas (``"sk-ab"`` then ``"cdef…"``)
leaves no whole key in any one chunk: replacing the key in each chunk finds nothing, and
the two halves reach the evidence. Here the pieces of each assembled field (a choice's
``content``, ``reasoning_content``, ``text``, a tool call's ``arguments``; choices and tool
calls matched by their ``index``) are joined, the secrets and private values are found in
the joined text, and each piece loses its share of every match: the first piece of a match
carries its replacement, the others become empty where they held part of it. Every other
string of a chunk is scrubbed on its own, decoded (an escaped ``\\u0073k-`` is seen as
``sk-``); a line that is not a JSON event is scrubbed as text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

Span = tuple[int, int, str]
Path = tuple[Any, ...]

ASSEMBLED = frozenset({"content", "reasoning_content", "reasoning", "text", "arguments"})
"""Fields whose pieces a client concatenates across chunks."""


class _Piece:
    """One string of one chunk: where it lives, so it can be rewritten in place."""

    __slots__ = ("holder", "key", "line", "text")

    def __init__(self, holder: dict[str, Any] | list[Any], key: Any, line: int, text: str):
        self.holder, self.key, self.line, self.text = holder, key, line, text


def _walk(
    value: Any, path: Path, line: int, groups: dict[Path, list[_Piece]], lone: list[_Piece]
) -> None:
    items: list[tuple[Any, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, v in items:
        if isinstance(v, str):
            piece = _Piece(value, key, line, v)
            if key in ASSEMBLED:
                groups.setdefault((*path, key), []).append(piece)
            else:
                lone.append(piece)
        else:
            # A choice or a tool call is matched by its ``index``, not its list position.
            step = (
                ("#", v["index"])
                if isinstance(v, dict) and isinstance(v.get("index"), int)
                else key
            )
            _walk(v, (*path, step), line, groups, lone)


def _cut(pieces: list[_Piece], spans: list[Span]) -> set[int]:
    """Apply ``spans`` (on the joined text) to the pieces; the lines changed."""
    edits: dict[int, list[Span]] = {}
    offset = 0
    starts = []
    for p in pieces:
        starts.append(offset)
        offset += len(p.text)
    for a, b, repl in spans:
        first = True
        for i, p in enumerate(pieces):
            lo, hi = starts[i], starts[i] + len(p.text)
            if hi <= a or lo >= b or lo == hi:
                continue
            edits.setdefault(i, []).append(
                (max(a, lo) - lo, min(b, hi) - lo, repl if first else "")
            )
            first = False
    changed: set[int] = set()
    for i, cuts in edits.items():
        p = pieces[i]
        out, pos = [], 0
        for a, b, repl in sorted(cuts):
            out += [p.text[pos:a], repl]
            pos = b
        out.append(p.text[pos:])
        p.text = "".join(out)
        p.holder[p.key] = p.text
        changed.add(p.line)
    return changed


def _keys(value: Any, text: Callable[[str], str]) -> Any:
    """``value`` with its dictionary keys scrubbed (the same object when none changes)."""
    if isinstance(value, list):
        items = [_keys(v, text) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if not isinstance(value, dict):
        return value
    out, changed = {}, False
    for k, v in value.items():
        key = text(k) if isinstance(k, str) else k
        clean = _keys(v, text)
        changed = changed or key != k or clean is not v
        out[key] = clean
    return out if changed else value


def _text(s: str, spans: list[Span]) -> str:
    out, pos = [], 0
    for a, b, repl in spans:
        out += [s[pos:a], repl]
        pos = b
    out.append(s[pos:])
    return "".join(out)


def scrub_stream(
    body: str, spans: Callable[[str], list[Span]], text: Callable[[str], str]
) -> str | None:
    """``body`` (a raw SSE stream) with secrets and private values removed from the text
    each field assembles to (``spans`` finds them; ``text`` scrubs a lone string); None
    when ``body`` has no JSON ``data:`` line (not a stream)."""
    lines = body.splitlines(keepends=True)
    events: dict[int, Any] = {}
    groups: dict[Path, list[_Piece]] = {}
    lone: list[_Piece] = []
    other: list[int] = []
    for n, line in enumerate(lines):
        payload = line[5:].strip() if line.startswith("data:") else ""
        try:
            obj = orjson.loads(payload) if payload.startswith(("{", "[")) else None
        except orjson.JSONDecodeError:
            obj = None
        if obj is None:
            other.append(n)  # event:, id:, comments, [DONE], a broken event: as text
            continue
        events[n] = obj
        _walk(obj, (), n, groups, lone)
    if not events:
        return None
    for n in other:
        if found := spans(lines[n]):
            lines[n] = _text(lines[n], found)
    changed: set[int] = set()
    for pieces in groups.values():
        joined = "".join(p.text for p in pieces)
        if found := spans(joined):
            changed |= _cut(pieces, found)
    for p in lone:  # ids, model names, roles: few distinct values, the text cache knows them
        clean = text(p.text)
        if clean != p.text:
            p.holder[p.key] = clean
            changed.add(p.line)
    for n, obj in events.items():  # a key is the server's text too
        clean = _keys(obj, text)
        if clean is not obj:
            events[n] = clean
            changed.add(n)
    for n in changed:
        line = lines[n]
        ending = line[len(line.rstrip("\r\n")) :]
        space = " " if line.startswith("data: ") else ""
        lines[n] = f"data:{space}{orjson.dumps(events[n]).decode()}{ending}"
    return "".join(lines)
