"""``POST /v1/responses``: OpenAI's Responses API, streamed as its typed events.

The request is read as the chat route reads its own (``input`` — a string or a list of
messages — and ``instructions`` become messages, ``max_output_tokens`` the limit, flat
function tools chat's nested ones), so the same plan, scheduler and faults serve it. The
stream, one event per output token as the chat route sends one chunk per token::

    event: response.created                      (before the first token)
    event: response.output_item.added            (a reasoning, message or function_call item)
    event: response.reasoning_text.delta         (a reasoning token)
    event: response.output_text.delta            (a content token)
    event: response.function_call_arguments.delta
    event: response.completed                    (usage: input_tokens, output_tokens; at
                                                  the token limit status "incomplete", as
                                                  vLLM 0.32 sends it)

There is no ``[DONE]``: the stream ends after ``response.completed``. Errors and the
mid-stream faults are written as on the chat route (an ``{"error": ...}`` event, a cut
JSON object), which a Responses client must classify too.
"""

from __future__ import annotations

from typing import Any

import orjson

from simengine.textgen import K_CONTENT, K_REASONING, K_TOOL_HEAD, Plan
from simengine.validate import ApiError

__all__ = ["ResponsesTemplate", "chat_body", "response_body"]


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (kind.encode(), orjson.dumps({"type": kind, **obj}))


def _message_text(content: object) -> str:
    """A Responses message's content (a string, or input_text/output_text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    raise ApiError(400, "input[].content must be a string or a list of content parts")


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body that asks the same as this Responses body."""
    given = body.get("input")
    if isinstance(given, str):
        messages: list[dict[str, Any]] = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given:
        messages = []
        for item in given:
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                raise ApiError(400, "input[] items must be messages with a string 'role'")
            messages.append({"role": item["role"], "content": _message_text(item.get("content"))})
    else:
        raise ApiError(400, "input: Field required (a string or a non-empty list of messages)")
    if isinstance(body.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    out["stream"] = body.get("stream", False)
    if body.get("max_output_tokens") is not None:
        out["max_completion_tokens"] = body["max_output_tokens"]
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        out["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
            for t in tools
            if isinstance(t, dict) and t.get("type") == "function"
        ]
    for key in ("temperature", "top_p", "ignore_eos", "parallel_tool_calls"):
        if key in body:
            out[key] = body[key]
    return out


def _usage(prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


class ResponsesTemplate:
    """The stream's events of one response (the chat ``StreamTemplate``'s interface)."""

    chat = True
    """The scheduler sends ``role()`` (here: ``response.created``) before the first token."""

    __slots__ = ("_reasoning", "_seq", "created", "model", "rid")

    def __init__(self, rid: str, created: int, model: str) -> None:
        self.rid = rid
        self.created = created
        self.model = model
        self._seq = 1  # sequence_number of the next event after response.created
        self._reasoning = 0

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {"id": self.rid, "object": "response", "created_at": self.created,
                "model": self.model, "status": status, **extra}  # fmt: skip

    def frags(self, plan: Plan) -> list[bytes]:
        """Each output token's event(s), with the output item it opens when it opens one."""
        out: list[bytes] = []
        index, item, last_kind = -1, "", -1
        tidx = plan.tool_index
        for n, (kind, text) in enumerate(zip(plan.kinds, plan.texts, strict=True)):
            head = b""
            if kind in (K_REASONING, K_CONTENT) and kind != last_kind:
                index += 1
                item = f"{'rs' if kind == K_REASONING else 'msg'}_{index}"
                typ = "reasoning" if kind == K_REASONING else "message"
                head = self._next("response.output_item.added", output_index=index,
                                  item={"id": item, "type": typ, "role": "assistant"})  # fmt: skip
            last_kind = kind
            if kind == K_REASONING:
                self._reasoning += 1
                ev = self._next("response.reasoning_text.delta", item_id=item,
                                output_index=index, content_index=0, delta=text)  # fmt: skip
            elif kind == K_CONTENT:
                ev = self._next("response.output_text.delta", item_id=item,
                                output_index=index, content_index=0, delta=text)  # fmt: skip
            elif kind == K_TOOL_HEAD:
                index += 1
                call = plan.tool_calls[tidx[n] if tidx else 0]
                item = f"fc_{index}"
                ev = self._next("response.output_item.added", output_index=index,
                                item={"id": item, "type": "function_call", "call_id": call.id,
                                      "name": text, "arguments": ""})  # fmt: skip
            else:
                ev = self._next("response.function_call_arguments.delta", item_id=item,
                                output_index=index, delta=text)  # fmt: skip
            out.append(head + ev)
        return out

    def _next(self, kind: str, **obj: Any) -> bytes:
        ev = _event(kind, {"sequence_number": self._seq, **obj})
        self._seq += 1
        return ev

    def token(self, frag: bytes) -> bytes:
        """A framed HTTP chunk holding one token's event(s)."""
        return b"%x\r\n%b\r\n" % (len(frag), frag)

    def role(self) -> bytes:
        """The framed ``response.created`` (sequence number 0)."""
        ev = _event("response.created", {"sequence_number": 0,
                                         "response": self._response("in_progress")})  # fmt: skip
        return self.token(ev)

    def tail(self, finish: str, prompt: int, completion: int, include_usage: bool) -> bytes:
        """The framed last event, ``response.completed`` (``status: incomplete`` at the
        token limit); usage always (the Responses API has no include_usage)."""
        usage = _usage(prompt, completion, min(self._reasoning, completion))
        if finish == "length":  # as vLLM 0.32: response.completed, status incomplete
            resp = self._response("incomplete", usage=usage,
                                  incomplete_details={"reason": "max_output_tokens"})  # fmt: skip
        else:
            resp = self._response("completed", usage=usage, incomplete_details=None)
        return self.token(self._next("response.completed", response=resp))


def response_body(
    rid: str, created: int, model: str, plan: Plan, n: int, prompt: int, finish: str
) -> bytes:
    """A non-streamed ``response`` object of the first ``n`` planned tokens."""
    text = "".join(t for k, t in zip(plan.kinds[:n], plan.texts[:n], strict=True) if k == K_CONTENT)
    reasoning = sum(1 for k in plan.kinds[:n] if k == K_REASONING)
    output: list[dict[str, Any]] = []
    if text:
        output.append({"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": text}]})  # fmt: skip
    status = "incomplete" if finish == "length" else "completed"
    return orjson.dumps(
        {"id": rid, "object": "response", "created_at": created, "model": model,
         "status": status, "output": output, "usage": _usage(prompt, n, reasoning)}
    )  # fmt: skip
