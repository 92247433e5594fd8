"""What a replayed trace sends: arrival ``k``'s prompt of its token count, shared blocks
shared, and its output length as ``max_tokens``.

A trace (:mod:`loadgen.traces`) gives counts, not text, so the text is synthesised from
one seeded filler of words and a tag per block:

- a block (a Mooncake hash id, a soaktop prefix block, or an arrival's own unshared
  tail) is its tag — a few words spelling its number, offset by a salt of the trace's
  hash and the seed — then the filler's first words (seeded the same way). Arrivals
  that share block ids send the same leading text, so a prefix cache (vLLM's, the
  simulated engine's) hits on them; a different id differs in its first words, so
  nothing else is shared (an engine's block hash chains over its parents), nor with
  another trace. The same trace replayed again with the same seed sends the same text;
- the word counts come from the server's ``/tokenize``: tokens per filler word, and the
  fixed tokens the prompt costs around its text (a chat template, a BOS) measured once
  before the load (:func:`calibrate`), then checked once per length bucket (a power of
  two of input tokens). ``input_tokens`` is the whole prompt as the server counts it.

Nothing per arrival is kept but the parsed trace: the body is built when arrival ``k`` is
sent (a list index, a join of block strings — full blocks cached — and one
``orjson.dumps``), so a trace of 100k arrivals holds no 100k prompt strings.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.request_source import PlannedRequest
from loadgen.traces import BLOCK_TOKENS, Trace, TraceArrival

_VOCAB = (
    "system latency token stream cache batch engine queue replica memory block kernel "
    "request window drain barrier worker metric signal record journal verdict gate probe "
    "schema value number river mountain garden paper market orbit candle lantern harbor"
).split()
_PAIRS = tuple(f" {a} {b}" for a in _VOCAB for b in _VOCAB)
CALIBRATION_WORDS = (256, 1024)
"""Filler lengths (words) whose token counts give tokens per word and the fixed cost."""
TOLERANCE_TOKENS = 2
"""A prompt within this many tokens (or 1 %) of its target is on target."""

TokenCounter = Callable[[str], Awaitable[int | None]]


@dataclass(frozen=True)
class TracePool(PromptPool):
    """The trace's text material and calibration, in the record's prompt-pool place
    (``identity.prompt_pool``; its ``trace`` says which trace)."""

    trace: Trace | None = None
    time_scale: float = 1.0
    seed: int = 0
    tokens_per_word: float = 1.0
    """Server tokens per filler word (1 when the server has no ``/tokenize``)."""
    fixed_tokens: float = 0.0
    """Tokens the prompt costs beyond its text (chat template, BOS)."""
    calibrated: bool = False
    checks: tuple[tuple[int, int], ...] = field(default=())
    """(target, server's count) of one prompt per length bucket."""

    @property
    def sha256(self) -> str:
        """Of the trace file and of how its text is made (two runs with the same hash sent
        the same prompts)."""
        assert self.trace is not None
        h = hashlib.sha256(self.trace.sha256.encode())
        h.update(f"|{self.seed}|{self.tokens_per_word!r}|{self.fixed_tokens!r}".encode())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        """The pool facts, with the trace's own (:meth:`loadgen.traces.Trace.facts`)."""
        assert self.trace is not None
        arrivals = self.trace.arrivals
        worst = max((abs(m - t) for t, m in self.checks), default=None)
        return {
            "source": f"trace:{self.trace.format}:{self.trace.path}",
            "size": len(arrivals),
            "sha256": self.sha256,
            "unique_prefix": False,
            "nominal_input_tokens_mean": sum(a.input_tokens for a in arrivals) / len(arrivals),
            "trace": self.trace.facts(self.time_scale)
            | {
                "tokens_per_word": self.tokens_per_word if self.calibrated else None,
                "fixed_tokens": self.fixed_tokens if self.calibrated else None,
                "calibration_checks": [list(c) for c in self.checks],
                "calibration_worst_tokens": worst,
            },
        }


class _Text:
    """Block texts: a tag of ``width`` words spelling the block's code, then filler."""

    def __init__(self, seed: int, longest_words: int, codes: int) -> None:
        rng = random.Random(seed)
        words = [" " + rng.choice(_VOCAB) for _ in range(max(1, longest_words))]
        self.filler = "".join(words)
        self.ends = [0]
        for w in words:
            self.ends.append(self.ends[-1] + len(w))
        # Tags are spelled two words at a time (one lookup per pair), so even widths.
        self.width = 2 * max(2, math.ceil(math.log(max(codes, 2), len(_PAIRS))))
        self.full_words = 0
        self.full_filler = ""
        """The filler of a full block (after its tag), built once."""

    def set_full(self, words: int) -> None:
        """A full block is ``words`` words long."""
        self.full_words = words
        self.full_filler = self.filler[: self.ends[max(0, words - self.width)]]

    def tag(self, code: int) -> str:
        """The words spelling ``code`` (``width`` of them, each with its leading space)."""
        out = []
        for _ in range(self.width // 2):
            code, pair = divmod(code, len(_PAIRS))
            out.append(_PAIRS[pair])
        return "".join(out)

    def segment(self, code: int, words: int, into: list[str]) -> None:
        """Block ``code`` cut to ``words`` words, appended to ``into`` as its parts (the
        final join copies each once)."""
        tag = self.tag(code)
        if words <= self.width:
            into.append(tag[: self._tag_end(tag, words)])
        elif words == self.full_words:
            into += (tag, self.full_filler)
        else:
            into += (tag, self.filler[: self.ends[words - self.width]])

    @staticmethod
    def _tag_end(tag: str, words: int) -> int:
        at = -1
        for _ in range(words + 1):
            at = tag.find(" ", at + 1)
            if at < 0:
                return len(tag)
        return at


class TraceSource:
    """Arrival ``n`` of the trace, as a request (the :class:`RequestSource` of a replay)."""

    def __init__(self, pool: TracePool, bodies: BodyBuilder) -> None:
        assert pool.trace is not None
        self._arrivals = pool.trace.arrivals
        self._per_word = pool.tokens_per_word
        self._fixed = pool.fixed_tokens
        self._block_words = max(1, round(BLOCK_TOKENS / pool.tokens_per_word))
        longest = max(self._block_words, max(self.words(a.input_tokens) for a in self._arrivals))
        # The text's seed and the tags' offset come from the trace's hash too: another
        # trace replayed against the same warm server shares none of this one's text.
        salted = hashlib.sha256(f"{pool.seed}:{pool.trace.sha256}".encode()).digest()
        self._salt = int.from_bytes(salted[:3])
        codes = self._salt + 2 * _most_codes(pool.trace) + 2
        self._text = _Text(int.from_bytes(salted[3:11]), longest, codes)
        self._text.set_full(self._block_words)
        self._bodies = bodies
        self._builders: dict[int, tuple[BodyBuilder, int | None]] = {}
        self._path = bodies.path

    def words(self, tokens: int) -> int:
        """Filler words for a prompt of ``tokens`` tokens (at least one)."""
        return max(1, round((tokens - self._fixed) / self._per_word))

    def text(self, n: int, arrival: TraceArrival) -> str:
        """Arrival ``n``'s prompt text: its shared blocks, then its own tail."""
        left = self.words(arrival.input_tokens)
        per_block = self._block_words
        parts: list[str] = []
        seg, salt = self._text.segment, self._salt
        for block in arrival.blocks:
            if left <= 0:
                break
            take = per_block if left > per_block else left
            seg(salt + 2 * block, take, parts)  # even codes: shared blocks
            left -= take
        if left > 0:
            seg(salt + 2 * n + 1, left, parts)  # odd codes: arrival n's own tail
        return "".join(parts)

    def request(self, n: int) -> PlannedRequest:
        """Arrival ``n``: its prompt, ``max_tokens`` = its output tokens."""
        arrival = self._arrivals[n]
        built = self._builders.get(arrival.output_tokens)
        if built is None:
            b = replace(self._bodies, max_tokens=arrival.output_tokens)
            built = self._builders[arrival.output_tokens] = (b, b.output_limit)
        body = built[0].build(self.text(n, arrival))
        return PlannedRequest(n, body, built[1], self._path)


def _most_codes(trace: Trace) -> int:
    top = max((max(a.blocks) for a in trace.arrivals if a.blocks), default=0)
    return max(top, len(trace.arrivals))


async def calibrate(
    trace: Trace,
    *,
    time_scale: float,
    seed: int,
    count_text: TokenCounter | None,
    count_prompt: TokenCounter | None,
) -> TracePool:
    """The trace's pool: tokens per filler word from ``count_text`` (``/tokenize`` of a
    bare text), the fixed cost from ``count_prompt`` (the same text as the load sends it:
    a chat message, or the bare prompt), then one check per length bucket. Without a
    counter one word is taken for one token and nothing is claimed calibrated."""
    probe = _Text(seed, max(CALIBRATION_WORDS), 2)
    samples: list[list[str]] = [[], []]
    for words, into in zip(CALIBRATION_WORDS, samples, strict=True):
        probe.segment(0, words, into)
    short, long = ("".join(parts) for parts in samples)
    pool = TracePool(
        prompts=(Prompt(0, long),),
        source=f"trace:{trace.format}:{trace.path}",
        trace=trace,
        time_scale=time_scale,
        seed=seed,
    )
    if count_text is None or count_prompt is None:
        return pool
    a, b, c = await count_text(short), await count_text(long), await count_prompt(short)
    if not a or not b or not c or b <= a:
        return pool
    per_word = (b - a) / (CALIBRATION_WORDS[1] - CALIBRATION_WORDS[0])
    fixed = c - per_word * CALIBRATION_WORDS[0]
    pool = replace(pool, tokens_per_word=per_word, fixed_tokens=fixed, calibrated=True)
    source = TraceSource(pool, BodyBuilder(model="-"))
    checks = []
    seen: set[int] = set()
    for n, arrival in enumerate(trace.arrivals):
        bucket = arrival.input_tokens.bit_length()
        if bucket in seen:
            continue
        seen.add(bucket)
        measured = await count_prompt(source.text(n, arrival))
        if measured:
            checks.append((arrival.input_tokens, measured))
    return replace(pool, checks=tuple(checks))


def on_target(target: int, measured: int) -> bool:
    """Whether a prompt's server count is within the calibration's tolerance."""
    return abs(measured - target) <= max(TOLERANCE_TOKENS, target // 100)
