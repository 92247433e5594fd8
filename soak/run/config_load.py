"""Where a :class:`soak.run.config.RunConfig` comes from: CLI > ``SOAKTOP_*`` env > TOML
> defaults, merged, validated, and checked against what must hold when the run starts.

Every error is a :class:`~soak.run.config.ConfigError` whose message names the field and
where its value came from (flag, variable or config file); the CLI exits 2 on it before
any run directory exists.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from loadgen.headers import HeaderError, resolve_headers
from loadgen.proxy import proxy_problem
from soak.run.config import ConfigError, RunConfig
from soak.run.config_checks import file_problem
from soak.run.config_words import format_validation_error

_LIST_FIELDS = {
    "endpoints",
    "gates",
    "suite_files",
    "server_log",
    "dcgm",
    "ignore_xid",
    "server_pid",
    "require_telemetry",
}
# server_log_cmd: one command per variable (a command holds commas and spaces).


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``SOAKTOP_<FIELD>`` variables for known fields (lists are comma-separated)."""
    out: dict[str, Any] = {}
    for name in RunConfig.model_fields:
        raw = environ.get(f"SOAKTOP_{name.upper()}")
        if raw is None:
            continue
        if name == "server_log_cmd":
            out[name] = [raw]
        elif name == "thresholds":  # an expression holds commas (",abort"): split on ";"
            out[name] = [s.strip() for s in raw.split(";") if s.strip()]
        elif name == "recipe":  # "revision=abc;image=vllm:0.32": a note holds commas
            pairs = (item.partition("=") for item in raw.split(";") if item.strip())
            out[name] = {k.strip(): v.strip() for k, _, v in pairs}
        elif name in _LIST_FIELDS:
            out[name] = [s.strip() for s in raw.split(",") if s.strip()]
        else:
            out[name] = raw
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """The ``[run]`` table of a TOML file, or its top level when there is no such table;
    a ``[recipe]`` table beside ``[run]`` is its ``recipe`` (over ``[run]``'s own)."""
    if (why := file_problem(path)) is not None:
        raise ConfigError(f"config file {str(path)!r} {why}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {str(path)!r} is not valid TOML: not UTF-8 text at byte {e.start}"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None
    table = data.get("run", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {str(path)!r}: [run] must be a table")
    if "run" in data and "recipe" in data:
        if not isinstance(data["recipe"], dict):
            raise ConfigError(f"config file {str(path)!r}: [recipe] must be a table")
        inner = table.get("recipe", {})
        table = table | {"recipe": (inner if isinstance(inner, dict) else {}) | data["recipe"]}
    return table


def _merge_recipe(merged: Mapping[str, Any], layer: dict[str, Any]) -> None:
    """A layer's ``recipe`` adds to (and overrides keys of) the ones below it: ``--recipe
    k=v`` changes one fact of the config file's ``[recipe]``, not all of them."""
    below, mine = merged.get("recipe"), layer.get("recipe")
    if isinstance(below, dict) and isinstance(mine, dict):
        layer["recipe"] = below | mine


def load_config(
    cli: Mapping[str, Any],
    *,
    toml_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    base: Mapping[str, Any] | None = None,
    cli_flags: Mapping[str, str] | None = None,
) -> RunConfig:
    """Merge ``base`` < TOML < environment < CLI (``None`` CLI values are "not given"),
    validate every field and check what must hold when the run starts (the API key's
    variable is set, the prompt file parses). Raises :class:`ConfigError` only.

    ``cli_flags`` maps a field to the flag that set it, so an error names ``--flag``.
    """
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = dict(base or {})
    origins: dict[str, str] = {}
    if toml_path is not None:
        table = read_toml(toml_path)
        merged.update(table)
        origins |= dict.fromkeys(table, f"config file {toml_path}")
    overrides = env_overrides(env)
    _merge_recipe(merged, overrides)
    merged.update(overrides)
    origins |= {k: f"SOAKTOP_{k.upper()}" for k in overrides}
    given = {k: v for k, v in cli.items() if v is not None}
    _merge_recipe(merged, given)
    merged.update(given)
    origins |= {k: (cli_flags or {}).get(k, "command line") for k in given}
    if merged.get("max_requests") is not None and "duration_s" not in merged:
        merged["duration_s"] = None  # a request count alone ends the window, not the 60 s default
    try:
        cfg = RunConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, origins=origins)) from None
    _check_start(cfg, env, origins)
    return cfg


def _check_start(cfg: RunConfig, environ: Mapping[str, str], origins: Mapping[str, str]) -> None:
    """What only the starting CLI can check: its environment and the prompt file's content
    (parsed here as the runner will, so a bad file never gets as far as the runner)."""
    if cfg.api_key_env is not None and not environ.get(cfg.api_key_env):
        state = "is empty" if cfg.api_key_env in environ else "is not set"
        where = origins.get("api_key_env", "config")
        raise ConfigError(
            f"api_key_env = {cfg.api_key_env!r} ({where}): the environment variable "
            f"{cfg.api_key_env} {state}; export it holding the API key, or drop the option"
        )
    try:
        resolve_headers(cfg.headers, environ)  # an env: header's variable must be set
    except HeaderError as e:
        raise ConfigError(f"headers ({origins.get('headers', 'config')}): {e}") from None
    if (why := proxy_problem(cfg.endpoints, environ)) is not None:
        raise ConfigError(f"endpoints: {why}")
    if cfg.prompts is not None:
        from loadgen.prompts import PromptPoolError, load_file

        try:
            load_file(cfg.prompts, seed=cfg.pool_seed, limit=cfg.pool_size)
        except PromptPoolError as e:
            raise ConfigError(f"prompts = {str(cfg.prompts)!r}: {e}") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"prompts file {str(cfg.prompts)!r} cannot be used: {e}") from None
