"""Request validation with vLLM's status codes and messages.

A malformed body or a bad field is a 400 ``BadRequestError``; an unknown model a 404
``NotFoundError`` (checked after the body, as vLLM does); a prompt that leaves no room in
the context a 400 with vLLM's context-length wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from simengine.config import SimConfig
from simengine.textgen import OutputRequest
from simengine.tokenizer import count_text, render_chat


class ApiError(Exception):
    """An error response: HTTP status, message and vLLM error type."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


@dataclass(slots=True)
class ParsedRequest:
    """A validated generation request."""

    chat: bool
    stream: bool
    include_usage: bool
    prompt_tokens: int
    out: OutputRequest
    prefix_key: str | None = None
    prefix_tokens: int = 0


def _field_error(kind: str, loc: str, msg: str) -> ApiError:
    # FastAPI's RequestValidationError text, which vLLM returns as the 400 message.
    return ApiError(400, f"[{{'type': '{kind}', 'loc': ('body', '{loc}'), 'msg': '{msg}'}}]")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as an object, or a 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ApiError(
            400,
            f"[{{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'ctx': {{'error': '{e}'}}}}]",  # noqa: E501
        ) from None
    if not isinstance(body, dict):
        raise _field_error("model_attributes_type", "", "Input should be a valid dictionary")
    return body


def check_model(body: dict[str, Any], cfg: SimConfig) -> None:
    """404 unless the request names the served model (or none)."""
    model = body.get("model")
    if model is not None and model != cfg.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _field_error("int_type", name, "Input should be a valid integer")
    return value


def _bool_field(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _field_error("bool_type", name, "Input should be a valid boolean")
    return value


def _structured(body: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """(json schema, json_object flag) from response_format or structured_outputs."""
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
            raise _field_error("literal_error", "response_format", "Input should be 'text', "
                               "'json_object' or 'json_schema'")  # fmt: skip
        if rf["type"] == "json_object":
            return None, True
        if rf["type"] == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
                raise _field_error("missing", "response_format", "Field required")
            return js.get("schema") or {"type": "object"}, False
    so = body.get("structured_outputs")
    if isinstance(so, dict) and so.get("json") is not None:
        schema = so["json"]
        if isinstance(schema, str):
            try:
                schema = orjson.loads(schema)
            except orjson.JSONDecodeError:
                raise ApiError(400, "structured_outputs.json is not valid JSON") from None
        return (schema if isinstance(schema, dict) else {}), False
    return None, False


def _max_tokens(body: dict[str, Any], prompt: int, cfg: SimConfig, chat: bool) -> int:
    requested = _int_field(body, "max_completion_tokens") if chat else None
    if requested is None:
        requested = _int_field(body, "max_tokens")
    room = cfg.max_model_len - prompt
    if prompt >= cfg.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
            f"your request has {prompt} input tokens. Please reduce the length of the input "
            "messages.",
        )
    if requested is None:
        return min(room, cfg.default_max_tokens)
    if requested < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {requested}.")
    if requested > room:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
            f"model's maximum context length is {cfg.max_model_len} tokens and your request "
            f"has {prompt} input tokens ({requested} > {cfg.max_model_len} - {prompt}).",
        )
    return requested


def _common(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = _bool_field(body, "stream", False)
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
    n = _int_field(body, "n")
    if n not in (None, 1):
        raise ApiError(400, f"simengine serves n=1 only, got n={n}.")
    return stream, include_usage


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _field_error("list_type", "tools", "Input should be a valid list")
    choice = body.get("tool_choice")
    if choice is not None and choice != "none" and not tools:
        raise ApiError(400, "When using `tool_choice`, `tools` must be set.")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        names = {(t.get("function") or {}).get("name") for t in tools}
        if name not in names:
            raise ApiError(400, f"Tool '{name}' has not been passed in `tools`.")
    elif choice not in (None, "none", "auto", "required"):
        raise _field_error("literal_error", "tool_choice", "Input should be 'none', 'auto' or "
                           "'required'")  # fmt: skip
    return tools, choice


def parse_chat(body: dict[str, Any], cfg: SimConfig) -> ParsedRequest:
    """Validate a /v1/chat/completions body."""
    messages = body.get("messages")
    if messages is None:
        raise _field_error("missing", "messages", "Field required")
    if not isinstance(messages, list) or not messages:
        raise _field_error("list_type", "messages", "Input should be a non-empty list")
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise _field_error("missing", "messages", "Each message needs a string 'role'")
    stream, include_usage = _common(body)
    tools, choice = _tools(body)
    check_model(body, cfg)
    schema, json_object = _structured(body)
    _, prompt = render_chat(
        messages, tools or None, _bool_field(body, "add_generation_prompt", True)
    )
    max_tokens = _max_tokens(body, prompt, cfg, chat=True)
    first = messages[0]
    key = None
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        key = first["content"]
    out = OutputRequest(
        max_tokens=max_tokens,
        ignore_eos=_bool_field(body, "ignore_eos", False),
        min_tokens=_int_field(body, "min_tokens") or 0,
        json_schema=schema,
        json_object=json_object,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=_bool_field(body, "parallel_tool_calls", True),
        after_tool_result=messages[-1].get("role") == "tool",
        chat=True,
    )
    prefix_tokens = count_text(key) + 4 if key else 0
    return ParsedRequest(True, stream, include_usage, prompt, out, key, prefix_tokens)


def prompt_text(body: dict[str, Any]) -> tuple[str | None, int]:
    """The prompt of a completions or tokenize body: (text, token count)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, count_text(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return None, len(prompt)
    if prompt is None:
        raise _field_error("missing", "prompt", "Field required")
    raise ApiError(400, "simengine serves one prompt (a string or token ids) per request.")


def parse_completion(body: dict[str, Any], cfg: SimConfig) -> ParsedRequest:
    """Validate a /v1/completions body."""
    _, prompt = prompt_text(body)
    stream, include_usage = _common(body)
    check_model(body, cfg)
    schema, json_object = _structured(body)
    out = OutputRequest(
        max_tokens=_max_tokens(body, prompt, cfg, chat=False),
        ignore_eos=_bool_field(body, "ignore_eos", False),
        min_tokens=_int_field(body, "min_tokens") or 0,
        json_schema=schema,
        json_object=json_object,
        chat=False,
    )
    return ParsedRequest(False, stream, include_usage, prompt, out)
