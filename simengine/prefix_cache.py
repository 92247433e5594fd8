"""Automatic prefix caching as vLLM does it: full token blocks, hashed in a chain.

A prompt's tokens are cut into blocks of ``block_size``; each full block's key is a hash
of its parent's key and its own tokens, so a block matches only when everything before
it matches too. A request hits the leading run of blocks already cached — at most all
but its last token, which vLLM always computes — and its own full blocks are cached
(least recently used go first when the cache holds ``capacity`` blocks). A shared system
prompt, a trace's shared hash-id blocks and a repeated prompt all hit this way.

One simplification: a request's blocks are cached when it is submitted, not when its
prefill completes, so two identical requests arriving together both count the second as
a hit (vLLM would compute both if they landed in one step).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson

from simengine.tokenizer import GENERATION_PROMPT, TOKEN_RE, TOOLS_OVERHEAD, message_text


class PrefixCache:
    """The block hashes one replica holds (its ``vllm:prefix_cache_*`` counters count
    what :meth:`hit` returns)."""

    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_size = block_size
        self.capacity = max(1, capacity)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def hit(self, tokens: Sequence[str | int]) -> int:
        """Tokens of ``tokens``' leading blocks already cached; caches its full blocks."""
        bs = self.block_size
        full = len(tokens) // bs
        usable = (len(tokens) - 1) // bs  # the last token is always computed
        blocks = self._blocks
        parent = 0
        hits = 0
        matching = True
        for i in range(full):
            key = hash((parent, tuple(tokens[i * bs : (i + 1) * bs])))
            parent = key
            if matching and key in blocks and i < usable:
                hits += 1
                blocks.move_to_end(key)
                continue
            matching = False
            blocks[key] = None
            blocks.move_to_end(key)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return hits * bs


def prompt_tokens(body: dict[str, Any], chat: bool) -> list[str | int]:
    """The prompt's tokens as :mod:`simengine.tokenizer` counts them (one entry per
    counted token: template markers, words, punctuation, whitespace)."""
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, str):
            return list(TOKEN_RE.findall(prompt))
        return list(prompt) if isinstance(prompt, list) else []
    out: list[str | int] = []
    tools = body.get("tools")
    if tools:
        out += TOKEN_RE.findall(orjson.dumps(tools).decode())
        out += ["<|tools|>"] * TOOLS_OVERHEAD
    for msg in body.get("messages") or ():
        if isinstance(msg, dict):
            out += ["<|im_start|>", str(msg.get("role", ""))]
            out += TOKEN_RE.findall(message_text(msg))
            out += ["<|im_end|>", "\n"]
    if body.get("add_generation_prompt", True) is not False:
        out += ["<|im_start|>", "assistant", "\n"][:GENERATION_PROMPT]
    return out
