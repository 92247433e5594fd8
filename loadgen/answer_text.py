"""A conversation turn's answer, kept for the next turn's history, bounded.

A multi-turn session (:mod:`loadgen.conversation`) sends the assistant's actual answers
back as history, so the client must hand back each answer's visible text. It does so
with the collector the sanity checks already use (:class:`loadgen.sanity.VisibleText`:
the raw JSON-string bytes of each visible chunk, appended by the SSE parser): no work
per token beyond what the checks do, and none at all for a request that is not a turn
(the client makes an :class:`AnswerText` only when ``RequestResult.turn`` is set).

The bound: :data:`ANSWER_MAX_BYTES` of those bytes. The sanity collector folds its older
half away past that size (it wants the tail, where a loop shows); a history wants the
head, so at the first fold the head is copied aside, cut at a whole chunk, and the answer
is marked truncated (``RequestResult.answer_truncated``, counted in the record's
``sessions.history_truncated``).
"""

from __future__ import annotations

from typing import Final

from loadgen.envelope import RequestResult
from loadgen.sanity import COLLECT_MAX_BYTES, VisibleText, collected_text

__all__ = ["ANSWER_MAX_BYTES", "AnswerText"]

ANSWER_MAX_BYTES: Final = COLLECT_MAX_BYTES
"""Most bytes of one answer kept for the history (64 KiB of JSON-escaped text)."""
_QUOTE: Final = b'"'


class AnswerText(VisibleText):
    """The sanity collector, keeping the answer's first :data:`ANSWER_MAX_BYTES` too."""

    __slots__ = ("_head",)

    def __init__(self) -> None:
        super().__init__()
        self._head: bytes | None = None

    def spill(self) -> None:
        """Before the first fold, keep the head (whole chunks within the bound)."""
        if self._head is None:
            raw = self.raw
            cut = raw.rfind(_QUOTE, 0, ANSWER_MAX_BYTES) + 1  # 0 when one chunk is that long
            self._head = bytes(raw[:cut])
        super().spill()

    @property
    def truncated(self) -> bool:
        """The answer ran past the bound: :meth:`answer` is its head only."""
        return self._head is not None

    def answer(self) -> str:
        """The answer's visible text (decoded once, here)."""
        return collected_text(self._head if self._head is not None else bytes(self.raw))

    def hand_back(self, result: RequestResult) -> None:
        """Put the answer on a completed ``result`` (a failed turn has no next turn)."""
        if result.ok:
            result.answer = self.answer()
            result.answer_truncated = self.truncated
