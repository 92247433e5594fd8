"""A deterministic stand-in tokenizer.

Words, single punctuation marks and single whitespace characters are one token each, and a
chat message costs a fixed template overhead. What matters is not realism but agreement:
``/tokenize``, ``usage.prompt_tokens`` and ``vllm:prompt_tokens_total`` all count with
these functions, so soaktop can reconcile client and server counts exactly.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import orjson

TOKEN_RE = re.compile(r"\w+|[^\w\s]|\s")
#: Output text is cut into pieces that look more like BPE tokens (punctuation runs merge).
PIECE_RE = re.compile(r"\s?\w+|\s+|[^\w\s]+")

#: Template tokens around each chat message (``<|im_start|>role\n ... <|im_end|>\n``).
MESSAGE_OVERHEAD = 4
#: ``<|im_start|>assistant\n`` appended by add_generation_prompt.
GENERATION_PROMPT = 3
#: Template tokens around the rendered tool list.
TOOLS_OVERHEAD = 10
VOCAB_SIZE = 4102


def count_text(text: str) -> int:
    """Tokens in a plain string."""
    return len(TOKEN_RE.findall(text))


def token_ids(text: str) -> list[int]:
    """Stable fake ids for the tokens of ``text`` (same text, same ids)."""
    return [zlib.crc32(t.encode()) % VOCAB_SIZE for t in TOKEN_RE.findall(text)]


def content_text(content: Any) -> str:
    """The text of a message ``content``: a string, a list of parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
            elif isinstance(part, str):
                out.append(part)
        return "".join(out)
    return str(content)


def message_text(msg: dict[str, Any]) -> str:
    """A message's content plus the names and arguments of its tool calls."""
    text = content_text(msg.get("content"))
    for call in msg.get("tool_calls") or ():
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        if isinstance(fn, dict):
            text += str(fn.get("name", "")) + str(fn.get("arguments", ""))
    return text


def render_chat(
    messages: list[dict[str, Any]],
    tools: list[Any] | None = None,
    add_generation_prompt: bool = True,
) -> tuple[str, int]:
    """The text the chat template would see, and its token count.

    The count is the sum of the message texts' tokens plus fixed template overheads; the
    text is only used to derive stable token ids for ``/tokenize``.
    """
    parts: list[str] = []
    total = 0
    if tools:
        rendered = orjson.dumps(tools).decode()
        parts.append(rendered)
        total += count_text(rendered) + TOOLS_OVERHEAD
    for msg in messages:
        text = message_text(msg)
        role = str(msg.get("role", ""))
        parts.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
        total += count_text(text) + MESSAGE_OVERHEAD
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
        total += GENERATION_PROMPT
    return "".join(parts), total


def chat_token_ids(
    messages: list[dict[str, Any]],
    tools: list[Any] | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of a chat prompt; ``len()`` equals :func:`render_chat`'s count."""
    _, n = render_chat(messages, tools, add_generation_prompt)
    ids: list[int] = []
    if tools:
        rendered = orjson.dumps(tools).decode()
        ids += token_ids(rendered) + [VOCAB_SIZE - 1] * TOOLS_OVERHEAD
    for msg in messages:
        text = message_text(msg)
        ids += [VOCAB_SIZE - 2, VOCAB_SIZE - 3] + token_ids(text) + [VOCAB_SIZE - 4] * 2
    if add_generation_prompt:
        ids += [VOCAB_SIZE - 2, VOCAB_SIZE - 5, VOCAB_SIZE - 6]
    assert len(ids) == n
    return ids


def split_pieces(text: str) -> list[str]:
    """Cut generated text into output tokens (their concatenation is ``text``)."""
    return PIECE_RE.findall(text)
