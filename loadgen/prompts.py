"""Prompt pools: ShareGPT files, JSONL files and synthetic prompts of a target length.

A pool is fixed before the load starts, shuffled once with a seed, cycled by a request
sequence number and hashed into the record, so two runs can prove they sent the same
prompts. Request bodies are built here too (the one place that knows the wire shape).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import orjson

Api = Literal["chat", "completions", "responses"]
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class PromptPoolError(ValueError):
    """A prompt source that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: the user text, and its token count when we know it before sending."""

    id: int
    text: str
    nominal_tokens: int | None = None


@dataclass(frozen=True)
class PromptPool:
    """A fixed, seeded, cycled list of prompts."""

    prompts: tuple[Prompt, ...]
    source: str
    """``sharegpt:<file>``, ``jsonl:<file>`` or ``synthetic:<tokens>``."""
    unique_prefix: bool = False
    """Prepend a per-request tag so no two requests share a prefix (defeats prefix caching)."""

    def __post_init__(self) -> None:
        if not self.prompts:
            raise PromptPoolError(f"prompt pool {self.source} holds no usable prompts")

    def pick(self, seq: int) -> Prompt:
        """The prompt for request number ``seq`` (0-based): the pool, cycled."""
        return self.prompts[seq % len(self.prompts)]

    def text_for(self, seq: int, prompt: Prompt) -> str:
        """The text actually sent for request ``seq``."""
        if self.unique_prefix:
            return f"[r{seq}] {prompt.text}"
        return prompt.text

    @property
    def sha256(self) -> str:
        """Hash of the prompts in pool order and of the prefix rule."""
        h = hashlib.sha256()
        h.update(b"unique_prefix=1\n" if self.unique_prefix else b"unique_prefix=0\n")
        for p in self.prompts:
            h.update(orjson.dumps([p.id, p.text]))
            h.update(b"\n")
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        """Facts about the pool for the record."""
        nominal = [p.nominal_tokens for p in self.prompts if p.nominal_tokens is not None]
        return {
            "source": self.source,
            "size": len(self.prompts),
            "sha256": self.sha256,
            "unique_prefix": self.unique_prefix,
            "nominal_input_tokens_mean": (sum(nominal) / len(nominal)) if nominal else None,
        }


@dataclass(frozen=True)
class BodyBuilder:
    """Builds the JSON body of one streamed load request.

    Never adds a per-request ``seed``: under concurrent load it crashes the CPU vLLM
    (``CPU Generator does not use offset``) and it is not what soak traffic looks like.
    """

    model: str
    api: Api = "chat"
    max_tokens: int = 256
    ignore_eos: bool = False
    temperature: float | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    max_tokens_field: MaxTokensField = "max_tokens"
    """Which body field carries ``max_tokens`` on the chat and completions APIs (OpenAI
    deprecated ``max_tokens`` for chat in favour of ``max_completion_tokens``); the
    Responses API always uses its own ``max_output_tokens``."""

    def build(self, text: str) -> bytes:
        """The request body as bytes, ready to POST."""
        body: dict[str, Any] = {"model": self.model, "stream": True}
        if self.api == "responses":
            # One user turn; the stream always ends in response.completed with usage.
            body["input"] = text
            body["max_output_tokens"] = self.max_tokens
        else:
            if self.api == "chat":
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            body[self.max_tokens_field] = self.max_tokens
            body["stream_options"] = {"include_usage": True}
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra)
        return orjson.dumps(body)

    @property
    def output_limit(self) -> int | None:
        """The output-token limit the body asks for: its max-tokens field (an ``extra``
        value wins) and, when ``extra`` adds the other of ``max_tokens`` /
        ``max_completion_tokens``, the larger. ``None`` when a limit is not an integer: the
        server decides, and usage above it is not provably impossible."""
        extra = dict(self.extra)
        if self.api == "responses":
            limits = [extra.get("max_output_tokens", self.max_tokens)]
        else:
            field = self.max_tokens_field
            limits = [extra.get(field, self.max_tokens)]
            other = "max_tokens" if field == "max_completion_tokens" else "max_completion_tokens"
            if other in extra:
                limits.append(extra[other])
        whole = [v for v in limits if isinstance(v, int) and not isinstance(v, bool)]
        return max(whole) if len(whole) == len(limits) else None

    @property
    def path(self) -> str:
        """The endpoint path for this API."""
        return _PATHS[self.api]


_PATHS: Final = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
}


def _shuffled(
    texts: Sequence[str], seed: int, nominal: Sequence[int | None] | None = None
) -> tuple[Prompt, ...]:
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    return tuple(
        Prompt(id=i, text=texts[i], nominal_tokens=nominal[i] if nominal else None) for i in order
    )


def _first_user_turn(conv: Any) -> str | None:
    """First human/user turn of a ShareGPT conversation in either form."""
    turns = conv.get("conversations") or conv.get("messages") if isinstance(conv, dict) else None
    if not isinstance(turns, list):
        return None
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        who = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if who in ("human", "user") and isinstance(text, str) and text.strip():
            return text
    return None


def load_sharegpt(path: Path, *, seed: int = 0, limit: int | None = None) -> PromptPool:
    """A ShareGPT JSON file (``from/value`` or ``role/content`` turns): first user turns."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise PromptPoolError(f"prompts file {path} does not exist") from None
    except orjson.JSONDecodeError as e:
        raise PromptPoolError(f"prompts file {path} is not valid JSON: {e}") from None
    if not isinstance(data, list):
        raise PromptPoolError(f"prompts file {path}: expected a JSON list of conversations")
    texts = [t for t in (_first_user_turn(c) for c in data) if t is not None]
    if limit is not None:
        texts = texts[:limit]
    return PromptPool(_shuffled(texts, seed), source=f"sharegpt:{path}")


def load_jsonl(path: Path, *, seed: int = 0, limit: int | None = None) -> PromptPool:
    """A JSONL file: one ``{"prompt": ...}``, ``{"text": ...}`` or JSON string per line."""
    texts: list[str] = []
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise PromptPoolError(f"prompts file {path} does not exist") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise PromptPoolError(f"prompts file {path} line {n}: not JSON ({e})") from None
        text = item.get("prompt", item.get("text")) if isinstance(item, dict) else item
        if not isinstance(text, str) or not text.strip():
            raise PromptPoolError(
                f'prompts file {path} line {n}: expected {{"prompt": "..."}} or a JSON string'
            )
        texts.append(text)
    if limit is not None:
        texts = texts[:limit]
    return PromptPool(_shuffled(texts, seed), source=f"jsonl:{path}")


def load_file(path: Path, *, seed: int = 0, limit: int | None = None) -> PromptPool:
    """Pick the loader by content: a JSON list is ShareGPT, anything else JSONL."""
    try:
        head = path.read_bytes()[:4096].lstrip()
    except FileNotFoundError:
        raise PromptPoolError(f"prompts file {path} does not exist") from None
    except IsADirectoryError:
        raise PromptPoolError(f"prompts file {path} is a directory") from None
    if head.startswith(b"["):
        return load_sharegpt(path, seed=seed, limit=limit)
    return load_jsonl(path, seed=seed, limit=limit)


_WORDS = (
    "system latency token stream cache batch engine queue replica memory block kernel request "
    "window drain barrier worker metric signal record journal verdict gate probe schema value "
    "number river mountain garden paper market orbit candle"
).split()

TokenCounter = Callable[[str], Awaitable[int | None]]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n)))


async def synthetic(
    *,
    count: int,
    target_tokens: int,
    seed: int = 0,
    unique_prefix: bool = True,
    count_tokens: TokenCounter | None = None,
) -> PromptPool:
    """``count`` prompts of about ``target_tokens`` tokens each.

    With ``count_tokens`` (the server's ``/tokenize``), the word count is calibrated so
    that the server counts close to the target; the calibrated count is recorded as the
    prompt's nominal tokens. Without it, one word is assumed to be one token and nominal
    is left unknown rather than guessed.
    """
    if target_tokens < 1:
        raise PromptPoolError(f"synthetic_input_tokens must be >= 1, got {target_tokens}")
    rng = random.Random(seed)
    n_words = target_tokens
    measured: int | None = None
    if count_tokens is not None:
        for _ in range(3):
            measured = await count_tokens(_words(random.Random(seed), n_words))
            if not measured:
                measured = None
                break
            if abs(measured - target_tokens) <= max(1, target_tokens // 100):
                break
            n_words = max(1, round(n_words * target_tokens / measured))
        else:  # not converged: the last count belongs to the previous word count
            measured = await count_tokens(_words(random.Random(seed), n_words)) or None
    texts = [_words(rng, n_words) for _ in range(count)]
    nominal = [measured] * count if measured is not None else None
    return PromptPool(
        _shuffled(texts, seed, nominal),
        source=f"synthetic:{target_tokens}",
        unique_prefix=unique_prefix,
    )
