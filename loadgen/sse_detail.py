"""The words of a stream's failure detail: an error body's message, an excerpt of bytes.

What :class:`loadgen.sse.SSEParser` (and the client, for a non-200 body) puts into
``RequestResult.failure_detail``: the human message of the OpenAI-style error shapes
engines send (``error_message``), an excerpt of offending bytes as a readable bytes literal
(``excerpt``), each cut to a bounded length (``trunc``, ``DETAIL_MAX``).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

__all__ = ["BYTES_MAX", "DETAIL_MAX", "error_message", "excerpt", "trunc"]

DETAIL_MAX: Final = 300
"""Longest failure detail kept (characters)."""
BYTES_MAX: Final = 120
"""Longest excerpt of offending bytes kept in a malformed-SSE detail."""


def trunc(text: str, limit: int = DETAIL_MAX) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis says it was)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(raw: bytes) -> str:
    """The offending bytes, truncated, as a readable Python bytes literal."""
    if len(raw) <= BYTES_MAX:
        return repr(raw)
    return repr(raw[:BYTES_MAX]) + f"…(+{len(raw) - BYTES_MAX} bytes)"


def error_message(obj: Any) -> str | None:
    """The human message of an OpenAI-style error body, or ``None`` if ``obj`` is no error.

    Shapes: ``{"error": {"message", "type", "code", ...}}`` (OpenAI, vLLM ≥ 0.10.1, SGLang,
    llama.cpp), ``{"error": "text", "error_type": ...}`` (TGI), vLLM's older flat
    ``{"object": "error", "message", "type", "code"}``, and FastAPI's ``{"detail": ...}``.
    """
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    src: dict[str, Any]
    if isinstance(err, dict):
        src = err
    elif isinstance(err, str) and err:
        kind = obj.get("error_type") or obj.get("type")
        return trunc(f"{err} [type={kind}]" if kind else err)
    elif obj.get("object") == "error":
        src = obj
    elif err:  # some other truthy error value
        return trunc(str(err))
    elif "detail" in obj and len(obj) == 1:
        return trunc(str(obj["detail"]))
    else:
        return None
    msg = src.get("message")
    text = str(msg) if msg is not None else orjson.dumps(src).decode(errors="replace")
    extra = [f"{k}={src[k]}" for k in ("type", "code") if src.get(k) is not None]
    if extra:
        text = f"{text} [{', '.join(extra)}]"
    return trunc(text)
