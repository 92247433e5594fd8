"""What a :class:`soak.run.config.RunConfig` field allows, and what went wrong, in words.

:func:`allowed` is read by the error messages, the ``--help`` texts and the README's
ranges, so all three say the same; :func:`format_validation_error` turns pydantic's
errors into one line per problem naming the field, where its value came from, the value
(bounded, credentials masked) and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import ValidationError

from soak.run.config import DAY_S, LONGEST_S, MAX_LIST, NAME_PATTERN, RunConfig

_PATTERNS = {
    NAME_PATTERN: "letters, digits, '.', '_' and '-'",
    r"^[a-z]+$": "lowercase letters",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an environment variable name (letters, digits and '_', "
    "not starting with a digit)",
}
_SPANS = {LONGEST_S: "30 days", DAY_S: "1 day", 3600: "1 hour"}


def _num(x: float, seconds: bool) -> str:
    text = f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
    span = _SPANS.get(float(x)) if seconds else None
    return f"{text} ({span})" if span else text


def _constraints(meta: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in meta:
        if isinstance(m, Ge):
            out["ge"] = m.ge
        elif isinstance(m, Gt):
            out["gt"] = m.gt
        elif isinstance(m, Le):
            out["le"] = m.le
        elif isinstance(m, Lt):
            out["lt"] = m.lt
        elif isinstance(m, MaxLen):
            out["max_len"] = m.max_length
        elif getattr(m, "pattern", None):
            out["pattern"] = m.pattern
        elif hasattr(m, "metadata"):  # a FieldInfo inside Annotated[...]
            out |= _constraints(list(m.metadata))
    return out


def _describe(ann: Any, meta: list[Any], seconds: bool) -> str:
    """The type ``ann`` with constraints ``meta`` in words."""
    optional = False
    if type(None) in get_args(ann) and get_origin(ann) is not Literal:
        optional = True
        ann = next(a for a in get_args(ann) if a is not type(None))
    if get_origin(ann) is Annotated:
        ann, *more = get_args(ann)
        meta = [*meta, *more]
    c = _constraints(meta)
    origin = get_origin(ann)
    if origin is list:
        item = _describe(get_args(ann)[0], [], seconds)
        text = f"a list of at most {c.get('max_len', MAX_LIST)}, each {item}"
    elif origin is Literal:
        text = "one of " + ", ".join(repr(a) for a in get_args(ann))
    elif ann is bool:
        text = "true or false"
    elif ann is int:
        lo = c.get("ge", c["gt"] + 1 if "gt" in c else None)
        text = "a whole number"
        if lo is not None and "le" in c:
            text += f" from {_num(lo, False)} to {_num(c['le'], False)}"
        elif lo is not None:
            text += f" of at least {_num(lo, False)}"
    elif ann is float:
        parts = []
        if "gt" in c:
            parts.append(f"above {_num(c['gt'], seconds)}")
        elif "ge" in c:
            parts.append(f"at least {_num(c['ge'], seconds)}")
        if "le" in c:
            parts.append(f"at most {_num(c['le'], seconds)}")
        text = "a finite number" + (" of seconds" if seconds else "")
        text += (" " + " and ".join(parts)) if parts else ""
    elif ann is Path:
        text = "a path"
    else:
        text = "text"
        if "pattern" in c:
            text += f" of {_PATTERNS.get(c['pattern'], 'the form ' + c['pattern'])}"
        if "max_len" in c:
            text += f", at most {c['max_len']} characters"
    return f"{text}, or unset" if optional else text


_IN_WORDS = {
    "endpoints": "1 to 256 http(s) URLs, each with a host and a port from 1 to 65535, "
    "no credentials, query or fragment",
    "dcgm": "up to 256 http(s) URLs, each with a host and a port from 1 to 65535",
    "prompts": "an existing, readable ShareGPT JSON or JSONL file, or unset",
    "suite_files": "up to 256 existing, readable suite files (JSON)",
    "server_log": "up to 256 paths: readable files, or files yet to appear in an existing "
    "directory",
    "server_log_cmd": "up to 256 command lines whose program is on PATH",
    "out": "a directory (created if missing) that can be written",
    "shards": "a whole number from 1 to 64, or auto (one per spare core, at most one per "
    "256 streams)",
    "canary_interval_s": "0 (no canaries), or a finite number of seconds above 0 and at "
    "most 2,592,000 (30 days)",
    "max_client_cpu_percent": "a finite percentage of one core, above 0 and at most 1,000",
    "max_client_behind": "a share of sampled reads, above 0 and at most 1",
    "require_telemetry": "a comma-separated list of engine, gpu, health, log, host "
    "(empty: none required)",
    "recipe": "up to 256 KEY=VALUE facts; a key of lower-case letters, digits, '_', '.', "
    "'-' (starting with a letter, at most 64 characters), a value of one line of at most "
    "500 characters",
    "server_cmd_file": "an existing, readable UTF-8 text file of at most 64 KiB, or unset",
    "mix": "an existing TOML file of 1 to 64 [[class]] tables (name, weight and the class's "
    "request fields: README, Mixed workloads), or unset",
    "metrics_host": "an IPv4 or IPv6 address (127.0.0.1, ::1, 0.0.0.0 for every interface) "
    "or localhost",
}


def allowed(name: str) -> str:
    """What field ``name`` accepts, in words, e.g. ``a whole number from 1 to 100,000``
    (the error messages, the ``--help`` texts and the README's ranges say the same)."""
    if name in _IN_WORDS:
        return _IN_WORDS[name]
    f = RunConfig.model_fields[name]
    return _describe(f.annotation, list(f.metadata), name.endswith("_s"))


# --- errors in words --------------------------------------------------------------------

_RANGE_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
    "int_parsing",
    "int_parsing_size",
    "int_type",
    "int_from_float",
    "float_parsing",
    "float_type",
    "bool_parsing",
    "bool_type",
    "string_type",
    "string_too_long",
    "string_too_short",
    "string_pattern_mismatch",
    "too_long",
    "too_short",
    "list_type",
    "path_type",
    "missing",
}


def format_validation_error(
    err: ValidationError, source: str = "", origins: Mapping[str, str] | None = None
) -> str:
    """One line per problem: the field, where its value came from, the value given and
    what is allowed."""
    lines = []
    for e in err.errors():
        loc = e["loc"]
        top = str(loc[0]) if loc else ""
        field = top + "".join(f"[{p}]" for p in loc[1:]) if loc else "config"
        where = f" ({origins[top]})" if origins and top in origins else source
        if e["type"] == "extra_forbidden":
            allowed_keys = ", ".join(sorted(RunConfig.model_fields))
            lines.append(f"unknown key {field!r}{where}; allowed keys: {allowed_keys}")
            continue
        value = _mask_userinfo(e.get("input"))
        hidden = isinstance(value, dict) or e["type"] == "missing" or top == "headers"
        shown = "" if hidden else f" = {_shown(value)}"  # a header's value may be a secret
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = "is required"
        if e["type"] in _RANGE_ERRORS and top in RunConfig.model_fields:
            msg += f" (allowed: {allowed(top)})"
        lines.append(f"{field}{shown}{where}: {msg}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    """``repr`` of a value for an error line, bounded (a megabyte string or a 10,000-digit
    number is named by its size, not printed)."""
    text = repr(_plain(value))
    return text if len(text) <= 200 else f"{text[:160]}… ({len(text)} characters)"


class _Huge(int):
    """A number too long to print (Python refuses ``repr`` past 4,300 digits)."""

    def __repr__(self) -> str:
        return f"<a number of about {int(self.bit_length() * math.log10(2)) + 1} digits>"


def _plain(value: Any) -> Any:
    """Paths shown as the strings the operator typed, not ``PosixPath('...')``; numbers
    too long to print named by their size."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return _Huge(value)
    return str(value) if isinstance(value, Path) else value


def _mask_userinfo(value: Any) -> Any:
    """Never echo a password given inside a URL, even in an error message."""
    if isinstance(value, list):
        return [_mask_userinfo(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        scheme, rest = value.split("://", 1)
        return f"{scheme}://<credentials>@{rest.split('@', 1)[1]}"
    return value
