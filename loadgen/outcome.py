"""What a finished HTTP 200 stream proves: the checks that run once per request at its end.

A ``[DONE]`` alone is not a success (issue 12 §2). Three questions, each answered from the
facts the SSE parser already kept (never per chunk — the read loop stays as cheap as it was):

- Is the ``usage`` block possible at all? (:func:`usage_problem` → ``impossible_usage``.)
- Did the stream carry any output? (:func:`is_empty_stream` → ``empty_stream``.)
- Do the streamed chunks and ``usage`` agree? (:func:`usage_disagrees` — a note, not a
  failure: computed from ``requests.jsonl`` by the summary, so ``verify`` recomputes it.)

Everything here is plain data in, words out; the values came from a server, so they are
shown with ``repr`` (control characters escaped) and truncated.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EMPTY_ANSWER_TOKENS",
    "USAGE_CHUNK_SLACK",
    "USAGE_INT_MAX",
    "is_empty_stream",
    "usage_disagrees",
    "usage_problem",
]

USAGE_INT_MAX: Final = 2**31 - 1
"""No engine counts tokens past a signed 32-bit integer (token positions are int32), and
no context comes near it: a larger count is not a count."""

USAGE_CHUNK_SLACK: Final = 2
"""Token-carrying chunks a stream may have beyond ``usage.completion_tokens``.

Every token-carrying chunk holds the text of at least one token, except for the few deltas
a tool-call or reasoning parser adds without a token of its own (a tool call's
id/name header, a final flush of the arguments). Fewer chunks than tokens is normal and
never flagged: vLLM coalesces tokens under load, speculative decoding sends several tokens
per chunk, SGLang's ``--stream-interval`` batches, an incomplete UTF-8 character or a
held-back stop string produces no chunk."""

_SHOW_MAX: Final = 60
_COUNTS: Final = ("prompt_tokens", "completion_tokens", "total_tokens")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 1] + "…"


def usage_problem(usage: object, max_tokens: int | None) -> str | None:
    """Why ``usage`` cannot be true, in words; ``None`` when it can be (or is absent).

    Flags only the impossible, under any engine's counting convention: a count that is not
    a JSON integer (a float, a string, a boolean), a negative count, a count above
    ``USAGE_INT_MAX``, ``completion_tokens`` above the request's ``max_tokens`` (when
    known), and ``total_tokens`` below ``prompt_tokens`` or ``completion_tokens``. A count
    that is absent or ``null`` is missing, not impossible (``usage_missing``); so is a
    ``total_tokens`` that differs from the sum, which engines compute differently.
    """
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return f"usage is {_show(usage)}, not a JSON object"
    counts: dict[str, int] = {}
    for key in _COUNTS:
        v = usage.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            return f"usage.{key} is {_show(v)}: a token count is a JSON integer"
        if v < 0:
            return f"usage.{key} is {v}: a token count cannot be negative"
        if v > USAGE_INT_MAX:
            return f"usage.{key} is {v}: beyond any context (the limit is 2^31 − 1)"
        counts[key] = v
    ct = counts.get("completion_tokens")
    if ct is not None and max_tokens is not None and ct > max_tokens:
        return f"usage.completion_tokens is {ct}, above the request's max_tokens of {max_tokens}"
    total = counts.get("total_tokens")
    if total is not None:
        for part in ("prompt_tokens", "completion_tokens"):
            v = counts.get(part)
            if v is not None and total < v:
                return f"usage.total_tokens is {total}, below usage.{part} of {v}"
    return None


EMPTY_ANSWER_TOKENS: Final = 1
"""The ``usage.completion_tokens`` of a generation that ended at once: its one token is the
end-of-sequence (or a one-token stop), which no chunk carries. A stream without a single
token-carrying chunk cannot have carried more."""


def is_empty_stream(chunks: int, finish_reason: str | None, completion_tokens: int | None) -> bool:
    """A ``[DONE]``-terminated stream that carried no output (``empty_stream``).

    ``chunks`` counts token-carrying chunks (content, text, reasoning, tool-call deltas):
    ``max_tokens=1`` gives one, a tool-call-only answer has tool-call deltas, a
    reasoning-only answer has reasoning chunks — none of them is empty. A stream without a
    single such chunk is a success only when the server says a generation finished
    (a ``finish_reason``) after exactly ``EMPTY_ANSWER_TOKENS`` (1) completion token: a
    model that ends at once (end-of-sequence as its first token). Those are counted in
    ``load.empty_answers``. Zero chunks with more tokens claimed (up to ``max_tokens``)
    would put tokens nobody received into tok/s: empty.
    """
    return chunks == 0 and not (finish_reason and completion_tokens == EMPTY_ANSWER_TOKENS)


def usage_disagrees(chunks: object, completion_tokens: object) -> bool:
    """More token-carrying chunks than ``usage.completion_tokens`` can explain.

    True when ``chunks > completion_tokens + USAGE_CHUNK_SLACK`` (both integers). Takes
    journal values, so anything else (missing usage, a hand-edited line) is simply False.
    """
    if not isinstance(chunks, int) or not isinstance(completion_tokens, int):
        return False
    return chunks > completion_tokens + USAGE_CHUNK_SLACK
