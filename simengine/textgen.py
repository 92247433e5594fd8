"""What a request's answer will be, decided at admission: an output plan of tokens.

A plan is a list of output tokens, each with a kind (reasoning, content, tool-call header,
tool-call argument fragment) and its text. The scheduler emits one plan token per step;
``completion_tokens`` is the number emitted, so usage always equals what the client got.
Everything is drawn from one per-request ``random.Random``, so a seed and an
``X-Request-Id`` fix the answer.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from simengine import contract
from simengine.schemagen import SchemaGenerator
from simengine.tokenizer import split_pieces

K_REASONING = 0
K_CONTENT = 1
K_TOOL_HEAD = 2
K_TOOL_ARGS = 3

_WORDS = (
    "the engine serves a stream of tokens while the scheduler keeps every running sequence "
    "in one batch and the cache holds blocks for each prompt so that a long soak shows how "
    "latency throughput memory and errors behave over hours on real hardware under steady "
    "load with retries timeouts and probes before and after the window operators watch "
    "graphs logs gauges counters histograms replicas gpus drivers kernels queues workers"
).split()
VOCAB: tuple[str, ...] = (*(" " + w for w in dict.fromkeys(_WORDS)), ".", ",")
_PERIOD = len(VOCAB) - 2
_COMMA = len(VOCAB) - 1
N_WORDS = _PERIOD
"""Vocabulary indices below this are words; the two after them are "." and ","."""
_REASONING_WORDS = tuple(" " + w for w in "let me think about the request step by step".split())

#: Pre-encoded stream fragments per vocabulary token (the hot path only concatenates).
CHAT_CONTENT_FRAGS = tuple(b'{"content":' + orjson.dumps(t) + b"}" for t in VOCAB)
TEXT_FRAGS = tuple(orjson.dumps(t) for t in VOCAB)


@dataclass(slots=True)
class ToolCall:
    """One planned tool call."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Plan:
    """The output tokens of one request, in order, and how it ends when all are emitted."""

    kinds: list[int]
    texts: list[str]
    finish: str = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_index: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


def eos_length(rng: random.Random, mean: float) -> int:
    """A geometric output length with the given mean (≥ 1)."""
    if mean <= 1:
        return 1
    p = 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def plain_text(rng: random.Random, n: int) -> tuple[list[int], list[str]]:
    """``n`` vocabulary tokens forming sentence-like text: indices and strings."""
    idx = rng.choices(range(_PERIOD), k=n)
    for i in range(11, n, 12):
        idx[i] = _PERIOD if i % 24 == 23 else _COMMA
    return idx, [VOCAB[i] for i in idx]


@dataclass(slots=True)
class OutputRequest:
    """The parts of a request that shape its answer."""

    max_tokens: int
    ignore_eos: bool = False
    min_tokens: int = 0
    json_schema: dict[str, Any] | None = None
    json_object: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    after_tool_result: bool = False
    chat: bool = True


def build_plan(
    req: OutputRequest,
    rng: random.Random,
    *,
    mean_output_tokens: float,
    reasoning_tokens: int,
    tool_call_probability: float,
    parallel_tool_call_probability: float,
    contract_fault: str | None = None,
) -> tuple[Plan, list[int] | None]:
    """The plan for a request, plus vocabulary indices when the answer is plain text.

    The plan holds at most ``max_tokens`` tokens; ``finish`` is ``length`` when the cap cut
    the answer short. ``contract_fault`` (a :data:`simengine.faults.CONTRACT_ACTIONS`
    name) breaks the JSON content or the first tool call before it is cut into tokens, so
    usage still counts exactly what is sent; an answer it cannot apply to is left as is,
    with a note.
    """
    kinds: list[int] = []
    texts: list[str] = []
    if req.chat and reasoning_tokens:
        r = [_REASONING_WORDS[i % len(_REASONING_WORDS)] for i in range(reasoning_tokens)]
        kinds += [K_REASONING] * len(r)
        texts += r
    tool_fault = contract_fault if contract_fault in contract.TOOL_FAULTS else None
    json_fault = contract_fault if contract_fault in contract.JSON_FAULTS else None
    calls = _tool_calls(req, rng, tool_call_probability, parallel_tool_call_probability, tool_fault)
    notes: list[str] = []
    if (tool_fault and not calls) or (
        json_fault and (calls or (req.json_schema is None and not req.json_object))
    ):
        notes.append(f"fault {contract_fault}: nothing to break in this answer; sent as is")
    vocab_idx: list[int] | None = None
    finish = "stop"
    tool_index: list[int] | None = None
    if calls:
        finish = "tool_calls"
        tool_index = [0] * len(kinds)
        for i, call in enumerate(calls):
            pieces = split_pieces(call.arguments)
            kinds += [K_TOOL_HEAD] + [K_TOOL_ARGS] * len(pieces)
            texts += [call.name, *pieces]
            tool_index += [i] * (len(pieces) + 1)
    elif req.json_schema is not None or req.json_object:
        gen = SchemaGenerator(req.json_schema or _JSON_OBJECT_SCHEMA, rng)
        value = gen.value()
        notes += gen.notes
        if json_fault == "json_control_char":
            text = contract.with_control_char(value)
        elif json_fault == "json_invalid":
            # Cut off mid-value yet finished with "stop": not a max_tokens cut.
            text = contract.cut_short(orjson.dumps(value).decode())
        else:
            text = orjson.dumps(value).decode()
        pieces = split_pieces(text)
        kinds += [K_CONTENT] * len(pieces)
        texts += pieces
    else:
        # EOS position; ignore_eos puts it past the cap so the answer ends on "length".
        n = req.max_tokens + 1 if req.ignore_eos else eos_length(rng, mean_output_tokens)
        n = min(max(n, req.min_tokens, 1), req.max_tokens + 1 - len(kinds))
        idx, words = plain_text(rng, max(n, 0))
        if not kinds:
            vocab_idx = idx  # plain text only: the scheduler may use pre-encoded fragments
        kinds += [K_CONTENT] * len(words)
        texts += words
    if len(texts) > req.max_tokens:
        del kinds[req.max_tokens :], texts[req.max_tokens :]
        if tool_index is not None:
            del tool_index[req.max_tokens :]
        if vocab_idx is not None:
            del vocab_idx[req.max_tokens :]
        finish = "length"
    plan = Plan(kinds, texts, finish, calls, tool_index, notes)
    return plan, vocab_idx


_JSON_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer"],
}


def _tool_calls(
    req: OutputRequest,
    rng: random.Random,
    p_call: float,
    p_parallel: float,
    fault: str | None = None,
) -> list[ToolCall]:
    if not req.chat or not req.tools:
        return []
    choice = req.tool_choice
    named: str | None = None
    if choice == "none":
        return []
    if isinstance(choice, dict):
        named = (choice.get("function") or {}).get("name")
    # "auto": answer a tool result in words; otherwise call a tool with probability p_call.
    elif choice in (None, "auto") and (req.after_tool_result or rng.random() >= p_call):
        return []
    offered = [t.get("function") or {} for t in req.tools if isinstance(t, dict)]
    funcs = offered
    if named is not None:
        funcs = [f for f in funcs if f.get("name") == named]
    if not funcs:
        return []
    n = 1
    if named is None and req.parallel_tool_calls and len(funcs) > 1:
        n = 2 if rng.random() < p_parallel else 1
    chosen = [funcs[0]] if named is not None else rng.sample(funcs, n)
    out = []
    for k, fn in enumerate(chosen):
        name = str(fn.get("name", ""))
        params = fn.get("parameters") or {"type": "object"}
        if k == 0 and fault == "tool_wrong_function":
            name, params = contract.wrong_function(name, offered, rng)
        args = SchemaGenerator(params, rng).value()
        if k == 0 and fault == "tool_bad_arguments":
            args = contract.break_arguments(args, params)
        # vLLM's tool parsers re-serialise the arguments with json.dumps (": " and ", ").
        out.append(
            ToolCall(
                id=f"chatcmpl-tool-{rng.getrandbits(128):032x}",
                name=name,
                arguments=json.dumps(args, ensure_ascii=False),
            )
        )
    return out
