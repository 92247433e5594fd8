"""Sanity of every load response: is an HTTP 200 answer plausibly text, or garbage?

Gates and canaries test a sample strictly; at full load an engine can still answer
garbage with HTTP 200 (vLLM #48089 and #55313: 250k trailing spaces; #19493). Every
completed load response is checked here, once, at its stream's end, for:

========================  =================================================================
flag                      raised when (default bounds)
========================  =================================================================
``empty_visible``         no visible output: no content/text and no tool call (a
                          reasoning-only answer), or only whitespace
``runaway_whitespace``    a whitespace run of ≥ ``WHITESPACE_RUN_MAX`` (1,000) characters
                          anywhere or of ≥ ``WHITESPACE_TAIL_MAX`` (100) at the end, or
                          whitespace above ``WHITESPACE_SHARE_MAX`` (70 %) of an answer of
                          ≥ ``WHITESPACE_MIN_CHARS`` (200) characters
``repetition``            over ≥ ``REPETITION_MIN_UNITS`` (64) units — a unit is one
                          chunk's value, about a token — more than
                          ``REPETITION_SHARE_MAX`` (50 %) of the ``NGRAM``-unit (4) n-grams
                          repeat an earlier one
``unrequested_finish``    ``finish_reason`` ``abort`` or ``error``; or ``length`` after fewer
                          than ``LENGTH_TINY_SHARE`` (¼) of ``max_tokens``, when EOS was
                          honoured (no ``ignore_eos``)
========================  =================================================================

Why these bounds. Ordinary text sits far from each: English prose is ~17 % whitespace and
code ~30–45 % (indentation), its longest run a few dozen characters, and an answer ends in
a newline or two (whitespace until ``max_tokens`` is the bug's shape). Random-sampled text
(the simulated engine, the tiny random vLLM model: 0 of 30 answers flagged) repeats well
under 10 % of its 4-grams, boilerplate-heavy code maybe 30 %; a looping model repeats
nearly all of them. 64 units keep short answers ("Yes.", a list of ten numbers) out of
the repetition check altogether. An engine only says ``length`` when a limit ran out; at
under a quarter of the one asked for, that limit was not the request's. Output-length
collapse against the run's own baseline is a window-level judgement (the endurance
judge), not a per-response one.

Cost. :class:`VisibleText` collects, for one stream, the raw JSON-string bytes of each
visible chunk's value with its closing quote as separator (every quote inside a value is
escaped, and is rewritten ``\\u0022`` on the rare paths where one can occur), up to
``COLLECT_MAX_BYTES``; past it the older half is folded into running counters (characters,
whitespace, runs) and dropped, so a stream holds at most that many bytes and the
repetition check sees the answer's last 32–64 KiB, where a loop shows. At the end the
bytes are split once at the separators into the units (compared as the bytes they came
as: a server escapes the same text the same way) and decoded once, by one ``orjson``
call, into the text; the checks are a few C-level passes (``translate``, ``strip``, a
``set`` of the units, and of n-gram tuples only when enough units repeat). Measured
(``bench/client_cost.py --sanity both``, 256 paced streams): ~0.2 µs per token to
collect, ~30–50 µs per 256-token answer to check; about 1 µs per token in all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import orjson

__all__ = [
    "COLLECT_MAX_BYTES",
    "LENGTH_TINY_SHARE",
    "NGRAM",
    "REPETITION_MIN_UNITS",
    "REPETITION_SHARE_MAX",
    "UNREQUESTED_FINISH",
    "WHITESPACE_MIN_CHARS",
    "WHITESPACE_RUN_MAX",
    "WHITESPACE_SHARE_MAX",
    "WHITESPACE_TAIL_MAX",
    "SanityFlag",
    "TextFacts",
    "VisibleText",
    "check",
    "collected_text",
    "repeated_share",
    "value_unit",
]


class SanityFlag(StrEnum):
    """What was wrong with a completed (HTTP 200, ``[DONE]``) load response."""

    EMPTY_VISIBLE = "empty_visible"
    """No visible output: whitespace only, or reasoning only (no content, no tool call)."""
    RUNAWAY_WHITESPACE = "runaway_whitespace"
    """A long whitespace run, or an answer mostly whitespace."""
    REPETITION = "repetition"
    """Degenerate repetition: most n-grams of the answer repeat an earlier one."""
    UNREQUESTED_FINISH = "unrequested_finish"
    """A finish reason the request did not ask for (``abort``, ``error``, an early
    ``length``)."""


COLLECT_MAX_BYTES: Final = 64 * 1024
"""Raw value bytes one stream holds; past it the older half is counted and dropped."""
WHITESPACE_RUN_MAX: Final = 1000
"""A whitespace run this long (characters) is runaway, whatever the answer's length."""
WHITESPACE_TAIL_MAX: Final = 100
"""A whitespace run this long at the very end is runaway (an answer ends in a newline or
two; the bug pads until ``max_tokens``)."""
WHITESPACE_SHARE_MAX: Final = 0.70
"""Whitespace above this share of an answer is runaway (prose ~17 %, code ~30–45 %)."""
WHITESPACE_MIN_CHARS: Final = 200
"""The share is judged only on answers at least this long (characters)."""
NGRAM: Final = 4
"""Units per n-gram of the repetition check."""
REPETITION_SHARE_MAX: Final = 0.50
"""More than this share of n-grams repeating an earlier one is degenerate."""
REPETITION_MIN_UNITS: Final = 64
"""Answers with fewer units (about tokens) are never judged repetitive."""
UNREQUESTED_FINISH: Final = frozenset({"abort", "error"})
"""Finish reasons no load request asks for."""
LENGTH_TINY_SHARE: Final = 0.25
"""``length`` below this share of ``max_tokens`` was not the request's limit."""

_SPACE_RUN: Final = re.compile(r"\s+")
_QUOTE: Final = b'"'
_ESCAPED_QUOTE: Final = b'\\"'
_QUOTE_ESCAPE: Final = b"\\u0022"
_ASCII_SPACE: Final = bytes(c for c in range(128) if chr(c).isspace())
"""What ``str.isspace``/``split``/``strip`` call whitespace among ASCII characters."""


@dataclass(frozen=True, slots=True)
class TextFacts:
    """What the checks need of one answer's visible text."""

    units: list[bytes]
    """The chunk values of the analysed part (all of it, or its last 32–64 KiB), as
    their raw JSON string bodies."""
    chars: int
    """Visible characters of the whole answer."""
    space: int
    """Whitespace characters of the whole answer."""
    longest_space_run: int
    """The longest whitespace run; exact whenever it reaches ``WHITESPACE_RUN_MAX``."""
    trailing_space_run: int = 0
    """The whitespace run the answer ends with."""
    tool_calls: bool = False
    """A tool-call delta was seen (visible output that is not text)."""

    @classmethod
    def of(cls, values: list[str], tool_calls: bool = False) -> TextFacts:
        """The facts of a whole answer given as its chunks' values (nothing dropped)."""
        tally = _Tally()
        tally.add("".join(values))
        return tally.facts([orjson.dumps(v)[1:-1] for v in values], tool_calls)


class _Tally:
    """Running counts over the answer's text, segment by segment, in order."""

    __slots__ = ("chars", "longest", "run", "space")

    def __init__(self) -> None:
        self.chars = 0
        self.space = 0
        self.run = 0  # the whitespace run at the end of what was added so far
        self.longest = 0

    def copy(self) -> _Tally:
        other = _Tally()
        other.chars, other.space, other.run, other.longest = (
            self.chars,
            self.space,
            self.run,
            self.longest,
        )
        return other

    def add(self, text: str) -> None:
        if not text:
            return
        n = len(text)
        if text.isascii():  # the usual case: one C pass deletes the whitespace bytes
            space = n - len(text.encode("ascii").translate(None, _ASCII_SPACE))
        else:
            space = n - sum(map(len, text.split()))
        self.chars += n
        self.space += space
        if space == n:  # all whitespace: the run goes on
            self.run += n
            return
        lead = n - len(text.lstrip())
        longest = max(self.longest, self.run + lead)
        if space >= WHITESPACE_RUN_MAX:  # only then can a run inside reach the bound
            longest = max(longest, max(map(len, _SPACE_RUN.findall(text))))
        self.longest = longest
        self.run = n - len(text.rstrip())

    def facts(self, units: list[bytes], tool_calls: bool) -> TextFacts:
        return TextFacts(
            units=units,
            chars=self.chars,
            space=self.space,
            longest_space_run=max(self.longest, self.run),
            trailing_space_run=self.run,
            tool_calls=tool_calls,
        )


def _units(raw: bytes) -> list[bytes]:
    """The units of collected bytes (values, each ending in its quote)."""
    units = raw.split(_QUOTE)
    units.pop()  # after the last separator: nothing
    return units


def _text(raw: bytes) -> str:
    """The text of collected bytes: the values joined, decoded once."""
    body = raw.replace(_QUOTE, b"")
    try:
        text: str = orjson.loads(b'"' + body + b'"')
    except orjson.JSONDecodeError:
        # orjson refuses lone surrogates (a server that splits a pair in separate
        # chunks' values is joined here, but not one that sends half a pair) and invalid
        # escapes; the standard library takes the first, a lossy decode the rest.
        try:
            text = json.loads(b'"' + body.decode("utf-8", "replace").encode() + b'"')
        except ValueError:
            text = body.decode("utf-8", "replace")
    return text


def collected_text(raw: bytes) -> str:
    """The text of bytes collected as :class:`VisibleText` collects them (values, each
    ending in its quote), decoded once; lossy, never raising, on a bad escape."""
    return _text(raw)


def value_unit(body: bytes) -> bytes:
    """A JSON string body as a collected unit: inner quotes as ``\\u0022``, then the
    separator quote (only the paths where a value may hold an escaped quote need it)."""
    if _QUOTE in body:
        body = body.replace(_ESCAPED_QUOTE, _QUOTE_ESCAPE)
    return body + _QUOTE


class VisibleText:
    """One stream's visible text, bounded: the parser appends each visible value's raw
    bytes with its closing quote to ``raw`` and calls :meth:`spill` past the cap."""

    __slots__ = ("_tally", "raw", "tool_calls")

    def __init__(self) -> None:
        self.raw = bytearray()
        """Collected values (JSON string bodies), each followed by a quote."""
        self.tool_calls = False
        """A tool-call delta was seen."""
        self._tally = _Tally()

    def spill(self) -> None:
        """Count the older half of ``raw`` (whole units) and drop it."""
        raw = self.raw
        cut = raw.find(_QUOTE, len(raw) // 2) + 1  # raw ends in a quote: found
        self._tally.add(_text(bytes(raw[:cut])))
        del raw[:cut]

    def facts(self) -> TextFacts:
        """The answer's facts, at its end (``raw`` is split and decoded once, here)."""
        raw = bytes(self.raw)
        tally = self._tally.copy()  # what was spilled, and now the rest
        tally.add(_text(raw))
        return tally.facts(_units(raw), self.tool_calls)


def repeated_share(units: Sequence[Hashable], n: int = NGRAM) -> float:
    """The share of ``n``-unit n-grams that repeat an earlier one (0 when too short)."""
    total = len(units) - n + 1
    if total < 1:
        return 0.0
    grams = set(zip(*(units[i:] for i in range(n)), strict=False))
    return 1.0 - len(grams) / total


def _repetitive(units: Sequence[Hashable]) -> bool:
    """More than ``REPETITION_SHARE_MAX`` of the n-grams repeat. A repeated n-gram starts
    with a repeated unit, so when few units repeat the n-grams need no counting (exact,
    and the usual case for a real model's text: it saves most of the check's cost)."""
    total = len(units) - NGRAM + 1
    if len(units) - len(set(units)) <= REPETITION_SHARE_MAX * total:
        return False
    return repeated_share(units) > REPETITION_SHARE_MAX


def check(
    text: TextFacts | None,
    *,
    finish_reason: str | None,
    output_tokens: int | None,
    max_tokens: int | None,
    ignore_eos: bool = False,
) -> tuple[str, ...]:
    """The sanity flags of one completed response (empty: nothing wrong).

    ``text`` None: no visible text or tool call arrived. ``output_tokens`` is usage's
    count (or the chunk count without usage); ``max_tokens`` the request's limit
    (None: unknown, the early-``length`` rule is skipped).
    """
    flags: list[str] = []
    if text is None or (text.space == text.chars and not text.tool_calls):
        flags.append(SanityFlag.EMPTY_VISIBLE)
    if text is not None and text.chars and _runaway(text):
        flags.append(SanityFlag.RUNAWAY_WHITESPACE)
    if text is not None and len(text.units) >= REPETITION_MIN_UNITS and _repetitive(text.units):
        flags.append(SanityFlag.REPETITION)
    if _unrequested(finish_reason, output_tokens, max_tokens, ignore_eos):
        flags.append(SanityFlag.UNREQUESTED_FINISH)
    return tuple(flags)


def _runaway(text: TextFacts) -> bool:
    if (
        text.longest_space_run >= WHITESPACE_RUN_MAX
        or text.trailing_space_run >= WHITESPACE_TAIL_MAX
    ):
        return True
    return text.chars >= WHITESPACE_MIN_CHARS and text.space > WHITESPACE_SHARE_MAX * text.chars


def _unrequested(
    finish: str | None, output_tokens: int | None, max_tokens: int | None, ignore_eos: bool
) -> bool:
    if finish in UNREQUESTED_FINISH:
        return True
    return (
        finish == "length"
        and not ignore_eos
        and max_tokens is not None
        and output_tokens is not None
        and output_tokens < LENGTH_TINY_SHARE * max_tokens
    )
