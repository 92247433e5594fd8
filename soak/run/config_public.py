"""Parts of :class:`soak.run.config.RunConfig` kept apart from its fields: the options that
cannot go together, the declared recipe's values as text, and the config as the run
directory holds it (redacted when ``--redact`` asks: endpoints, paths, the mix's files and
the trace's path)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadgen.headers import public_headers
from soak.record.redact_patterns import SECRET_MARK, scrub_secrets, secret_name
from soak.run.config_mix import redacted

if TYPE_CHECKING:
    from soak.run.config import RunConfig


def combination_problem(cfg: RunConfig) -> str | None:
    """Why these options cannot go together, in words (None: they can)."""
    if cfg.duration_s is None and cfg.max_requests is None and cfg.arrival != "trace":
        return "set duration_s or max_requests: the issue window needs an end"
    if cfg.prompts is not None and cfg.synthetic_input_tokens is not None:
        return "prompts and synthetic_input_tokens are exclusive: choose one source"
    if cfg.matrix is not None and (
        cfg.prompts is not None or cfg.synthetic_input_tokens is not None
    ):
        return (
            "matrix builds its own synthetic prompts per cell: drop prompts and "
            "synthetic_input_tokens"
        )
    return responses_problem(cfg)


_CHAT_ONLY = ("response_format", "tools", "tool_choice", "reasoning")
"""A mix class's fields sent in the chat API's shape: the Responses API spells each its own
way (``text.format``, flat function tools, ``reasoning.effort``) and vLLM ignores a field it
does not know, so the class would run unconstrained while the record says it was not."""


def responses_problem(cfg: RunConfig) -> str | None:
    """Why ``api = "responses"`` cannot carry the run's chat-shaped fields, in words."""
    if cfg.api != "responses":
        return None
    if cfg.reasoning_effort is not None:
        return (
            f"reasoning_effort = {cfg.reasoning_effort!r} is sent as the chat API's "
            "reasoning_effort, which /v1/responses does not read (it takes reasoning.effort): "
            "use --api chat, or drop --reasoning"
        )
    for c in cfg.mix.classes if cfg.mix is not None else ():
        used = [f for f in _CHAT_ONLY if getattr(c, f) is not None]
        if used:
            return (
                f"mix class {c.name!r}: {', '.join(used)} take the chat API's shape, which "
                "/v1/responses does not read (the class would run unconstrained): use "
                "--api chat, or drop them from the class (weights, prompts and max_tokens "
                "work with --api responses)"
            )
    return None


def declared_recipe(v: Any) -> Any:
    """``--recipe``/``[recipe]`` values as one line of text each, keys checked
    (:func:`soak.record.recipe.check_declared`); not a table: pydantic names the type."""
    from soak.record.recipe import check_declared

    if not isinstance(v, dict):
        return v
    out: dict[str, str] = {}
    for key, value in v.items():
        if isinstance(value, bool):
            value = str(value).lower()  # TOML's true, not Python's True
        elif isinstance(value, float) or (isinstance(value, int) and value.bit_length() < 256):
            value = str(value)
        elif not isinstance(value, str):
            raise ValueError(
                f"recipe {key}: {type(value).__name__} is not allowed; give one line of "
                "text, a number (at most 76 digits) or true/false"
            )
        out[check_declared(str(key).strip(), value.strip())] = value.strip()
    return out


def public_config(cfg: RunConfig) -> dict[str, Any]:
    """The config as written to the run directory (redacted when asked; a declared fact
    whose key names a secret never: ``<secret>``)."""
    data = cfg.model_dump(mode="json")
    data["headers"] = public_headers(cfg.headers)  # names only: a value never reaches disk
    data["recipe"] = {
        k: SECRET_MARK if secret_name(k) else scrub_secrets(v) for k, v in cfg.recipe.items()
    }
    if cfg.redact:
        data["endpoints"] = [f"<endpoint {i}>" for i in range(len(cfg.endpoints))]
        data["out"] = "<redacted>"
        if data["prompts"]:
            data["prompts"] = "<redacted>"
        data["api_key_env"] = "<redacted>" if data["api_key_env"] else None
        for key in ("ca_cert", "client_cert", "client_key"):
            data[key] = "<redacted>" if data[key] else None
        data["suite_files"] = ["<redacted>" for _ in data["suite_files"]]
        data["trace_file"] = "<redacted>" if data["trace_file"] else None
        data["mix"] = redacted(data["mix"]) if data["mix"] else None
        data["server_log"] = ["<redacted>" for _ in data["server_log"]]
        data["server_cmd_file"] = "<redacted>" if data["server_cmd_file"] else None
        data["server_log_cmd"] = ["<redacted>" for _ in data["server_log_cmd"]]
        data["dcgm"] = [f"<dcgm {i}>" for i in range(len(data["dcgm"]))]
    return data
