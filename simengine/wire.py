"""Bytes on the wire, exactly as vLLM's OpenAI server writes them.

Stream chunks are pre-split around the only part that changes per token (the delta), so the
scheduler's hot path is one ``join`` per token. Each SSE event travels as its own HTTP/1.1
chunk (``<hex len>\\r\\n<event>\\r\\n``), as uvicorn sends each item of a streaming body.
JSON is compact (``,`` and ``:`` without spaces), as pydantic's ``model_dump_json`` writes.
"""

from __future__ import annotations

from typing import Any

import orjson

from simengine.textgen import CHAT_CONTENT_FRAGS, K_TOOL_HEAD, TEXT_FRAGS, Plan

DONE = b"data: [DONE]\n\n"
CHUNK_EOF = b"0\r\n\r\n"

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def frame(event: bytes) -> bytes:
    """One HTTP/1.1 chunk holding ``event``."""
    return b"%x\r\n%b\r\n" % (len(event), event)


def error_obj(message: str, err_type: str, code: int) -> dict[str, Any]:
    """vLLM ≥ 0.10.1's error body (nested under ``error``)."""
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def error_body(message: str, err_type: str, code: int) -> bytes:
    """The JSON bytes of an error response."""
    return orjson.dumps(error_obj(message, err_type, code))


def sse_error(message: str, err_type: str = "InternalServerError", code: int = 500) -> bytes:
    """An error event inside a 200 stream, followed by ``[DONE]``, both framed."""
    return frame(b"data: " + error_body(message, err_type, code) + b"\n\n") + frame(DONE)


ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class StreamTemplate:
    """Pre-encoded pieces of one request's stream chunks."""

    __slots__ = ("_finish_tail", "chat", "head", "post_crlf", "pre", "size0", "usage_head")

    def __init__(self, request_id: str, created: int, model: str, chat: bool) -> None:
        self.chat = chat
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        self.head = b'data: {"id":%b,"object":"%b","created":%d,"model":%b' % (
            orjson.dumps(request_id),
            obj,
            created,
            orjson.dumps(model),
        )
        self.pre = self.head + (
            b',"choices":[{"index":0,"delta":' if chat else b',"choices":[{"index":0,"text":'
        )
        post = (
            b',"logprobs":null,"finish_reason":null}]}\n\n'
            if chat
            else b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
        )
        self.post_crlf = post + b"\r\n"
        self.size0 = len(self.pre) + len(post)
        self._finish_tail = b',"logprobs":null,"finish_reason":"%b","stop_reason":null}]}\n\n'
        self.usage_head = self.head + b',"choices":[],"usage":'

    def token(self, frag: bytes) -> bytes:
        """A framed chunk carrying one token's delta (chat) or text (completions)."""
        return b"".join((b"%x\r\n" % (self.size0 + len(frag)), self.pre, frag, self.post_crlf))

    def role(self) -> bytes:
        """The framed first chat chunk: role, empty content, no token."""
        return self.token(b'{"role":"assistant","content":""}')

    def finish(self, reason: str) -> bytes:
        """The framed chunk that carries the finish reason."""
        delta = b'""'
        if self.chat:
            delta = b"{}" if reason == "tool_calls" else b'{"content":""}'
        return frame(self.pre + delta + self._finish_tail % reason.encode())

    def tail(self, finish: str, prompt: int, completion: int, include_usage: bool) -> bytes:
        """The framed finish chunk, the usage chunk when asked for, and ``[DONE]``."""
        tail = self.finish(finish)
        if include_usage:
            tail += self.usage(prompt, completion)
        return tail + frame(DONE)

    def usage(self, prompt: int, completion: int) -> bytes:
        """The framed usage chunk (``choices: []``) sent with include_usage."""
        u = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
            prompt,
            prompt + completion,
            completion,
        )
        return frame(self.usage_head + u + b"}\n\n")


def chat_delta_frag(kind: int, text: str, tool_index: int, call_id: str = "") -> bytes:
    """The delta JSON of one chat output token (see :mod:`simengine.textgen` kinds)."""
    if kind == 1:
        return b'{"content":' + orjson.dumps(text) + b"}"
    if kind == 0:
        return b'{"reasoning":' + orjson.dumps(text) + b"}"
    if kind == 2:
        head = b'{"tool_calls":[{"index":%d,"id":%b,"type":"function",' % (
            tool_index,
            orjson.dumps(call_id),
        )
        return head + b'"function":{"name":%b,"arguments":""}}]}' % orjson.dumps(text)
    return b'{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]}' % (
        tool_index,
        orjson.dumps(text),
    )


def usage_obj(prompt: int, completion: int) -> dict[str, Any]:
    """The ``usage`` object of a non-streamed response."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def chat_response(
    request_id: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish: str,
    prompt: int,
    completion: int,
) -> bytes:
    """A non-streamed ``chat.completion`` body."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning": None,
    }
    msg.update(message)
    return orjson.dumps(
        {
            "id": request_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": msg,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage_obj(prompt, completion),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
    )


def completion_response(
    request_id: str, created: int, model: str, text: str, finish: str, prompt: int, completion: int
) -> bytes:
    """A non-streamed ``text_completion`` body."""
    return orjson.dumps(
        {
            "id": request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage_obj(prompt, completion),
            "kv_transfer_params": None,
        }
    )


def stream_frags(plan: Plan, vocab_idx: list[int] | None, chat: bool) -> list[bytes]:
    """Per-token stream fragments of a plan (pre-encoded tables for plain text)."""
    if vocab_idx is not None:
        table = CHAT_CONTENT_FRAGS if chat else TEXT_FRAGS
        return [table[i] for i in vocab_idx]
    if not chat:
        return [orjson.dumps(t) for t in plan.texts]
    ids = [c.id for c in plan.tool_calls]
    tidx = plan.tool_index
    out = []
    for n, (kind, text) in enumerate(zip(plan.kinds, plan.texts, strict=True)):
        ti = tidx[n] if tidx is not None else 0
        out.append(chat_delta_frag(kind, text, ti, ids[ti] if kind == K_TOOL_HEAD else ""))
    return out
