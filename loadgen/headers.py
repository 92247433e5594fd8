"""``--header``: extra request headers, their syntax and where their values may go.

Syntax (one header per ``--header``, repeatable)::

    --header "X-Tenant: blue"            # a literal value
    --header "Authorization: env:MY_TOK"  # the value is $MY_TOK, read when the run starts

A value that is exactly ``env:`` followed by an environment variable's name
(``[A-Za-z_][A-Za-z0-9_]*``) is taken from that variable; any other value is literal (a
literal value that itself reads ``env:NAME`` cannot be sent: put it in a variable). The
``env:`` form keeps a secret off the command line (``ps`` shows argv to every user).

Where a value goes: into the requests of the load, the gates and the scrapes of the
engine's own endpoints (``/metrics``, ``/v1/models``, ...), nowhere else. The run record
and ``config.json`` list header *names* only (:func:`public_headers`); a child process
gets the headers on its stdin, never in argv, and its environment loses the variables
the secrets come from, by name (:func:`secret_vars`, ``soak.run.shard_links.shard_env``).

Which values are secrets (:func:`secret_values`, replaced in every log, so a server that
echoes one into an error message does not carry it there): every ``env:`` value, and the
value of a credential-like name (``Authorization``, ``Proxy-Authorization``, ``Cookie``,
any name holding ``key``, ``token``, ``secret``, ``auth``, ``pass``, ``session``,
``cookie``, ``credential`` or ``signature``). Any other literal value is not: the user
typed it on the command line, and redacting a short word such as ``team`` from every log
line would mangle unrelated text (paths, model names).

Refused, in words: names that are not an HTTP token, hop-by-hop and framing headers
(``Host``, ``Content-Length``, ``Transfer-Encoding``, ``Connection``, ...) whose value the
HTTP client must own, the headers soaktop sets per request (``Content-Type``,
``X-Request-Id``, ``Accept-Encoding``), and CR, LF or NUL in a value (header injection).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "ENV_PREFIX",
    "FORBIDDEN",
    "HeaderError",
    "check_spec",
    "header_env_vars",
    "headers_problem",
    "public_headers",
    "resolve_headers",
    "run_headers",
    "secret_name",
    "secret_values",
    "secret_vars",
]

ENV_PREFIX: Final = "env:"
MAX_SPEC_CHARS: Final = 8192
"""Longest ``Name: value`` accepted (servers commonly cap one header line at 8 KiB)."""

_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

FORBIDDEN: Final = {
    "host": "the HTTP client sets it from the endpoint URL",
    "content-length": "the HTTP client frames each body itself",
    "transfer-encoding": "the HTTP client frames each body itself",
    "connection": "a hop-by-hop header: the client's connection pool owns it",
    "keep-alive": "a hop-by-hop header: the client's connection pool owns it",
    "proxy-connection": "a hop-by-hop header",
    "te": "a hop-by-hop header",
    "trailer": "a hop-by-hop header",
    "upgrade": "a hop-by-hop header",
    "content-type": "soaktop sends application/json",
    "accept-encoding": "soaktop asks for identity (a compressed stream would skew timings)",
    "x-request-id": "soaktop sets one per request (the journal's request id)",
}
"""Lower-cased names refused, and why (the error says it)."""

_SECRET_PARTS: Final = (
    "key",
    "token",
    "secret",
    "auth",
    "pass",
    "session",
    "cookie",
    "credential",
    "signature",
)
"""A header name holding one of these (case-insensitive) carries a credential: erring
towards secret costs only a redacted word in a log."""


class HeaderError(ValueError):
    """A ``--header`` that cannot be used; the message names it (never its value)."""


def _split(spec: str) -> tuple[str, str]:
    """``"Name: value"`` → (name, value), or HeaderError in words."""
    if len(spec) > MAX_SPEC_CHARS:
        raise HeaderError(f"--header of {len(spec)} characters: at most {MAX_SPEC_CHARS}")
    name, colon, value = spec.partition(":")
    name = name.strip()
    if not colon:
        raise HeaderError(
            f"--header {name[:40]!r}…: no ':' — write it as \"Name: value\" "
            f'(or "Name: {ENV_PREFIX}VAR" to take the value from $VAR)'
        )
    if not _TOKEN.match(name):
        raise HeaderError(
            f"--header name {name[:64]!r}: not an HTTP header name (letters, digits and "
            "!#$%&'*+-.^_`|~ only, no spaces)"
        )
    why = FORBIDDEN.get(name.lower())
    if why is not None:
        raise HeaderError(f"--header {name}: refused, {why}")
    value = value.strip(" \t")
    if any(c in value for c in "\r\n\0"):
        raise HeaderError(
            f"--header {name}: its value holds a CR, LF or NUL character (allowed: one "
            "line of text; a line break would inject another header)"
        )
    return name, value


def _env_name(value: str) -> str | None:
    """The variable named by an ``env:VAR`` value, else None (a literal value)."""
    if value.startswith(ENV_PREFIX) and _ENV_NAME.match(value[len(ENV_PREFIX) :]):
        return value[len(ENV_PREFIX) :]
    return None


def check_spec(spec: str) -> str:
    """Validate one ``--header`` as given (the environment is not read); return it."""
    name, value = _split(spec)
    if not value:
        raise HeaderError(f"--header {name}: empty value (give one, or drop the header)")
    return spec


def headers_problem(specs: Iterable[str], api_key_env: str | None) -> str | None:
    """What is wrong with the headers as a set (the environment is not read), in words:
    a name given twice, or an ``Authorization`` beside ``--api-key-env`` (which sends one)."""
    seen: set[str] = set()
    for spec in specs:
        name = _split(spec)[0]
        if name.lower() in seen:
            return f"--header {name}: given twice (one value per header name)"
        seen.add(name.lower())
        if name.lower() == "authorization" and api_key_env:
            return (
                f"--header {name} and --api-key-env {api_key_env} both set Authorization: keep one"
            )
    return None


def header_env_vars(specs: Iterable[str]) -> dict[str, str]:
    """Header name → the variable its value comes from, for the ``env:`` headers."""
    out: dict[str, str] = {}
    for spec in specs:
        name, value = _split(spec)
        var = _env_name(value)
        if var is not None:
            out[name] = var
    return out


def resolve_headers(specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The headers to send: each spec checked, ``env:`` values read from ``environ``.

    Raises HeaderError naming the header and the variable (never a value) when a name
    repeats or a variable is unset or empty, or when the variable's value holds a line
    break.
    """
    out: dict[str, str] = {}
    seen: set[str] = set()
    for spec in specs:
        name, value = _split(spec)
        if name.lower() in seen:
            raise HeaderError(f"--header {name}: given twice (one value per header name)")
        seen.add(name.lower())
        var = _env_name(value)
        if var is not None:
            got = environ.get(var)
            if not got:
                state = "is empty" if var in environ else "is not set"
                raise HeaderError(
                    f"--header {name}: {ENV_PREFIX}{var}, but the environment variable "
                    f"{var} {state}; export it holding the value, or drop the header"
                )
            if any(c in got for c in "\r\n\0"):
                raise HeaderError(
                    f"--header {name}: the value of ${var} holds a CR, LF or NUL character "
                    "(allowed: one line of text)"
                )
            value = got.strip(" \t")
        if not value:
            raise HeaderError(f"--header {name}: empty value (give one, or drop the header)")
        out[name] = value
    return out


def public_headers(specs: Iterable[str]) -> list[str]:
    """The headers as the record shows them: names, each value ``<redacted>`` or
    ``env:VAR`` (the variable's name is no secret; its value is)."""
    out = []
    for spec in specs:
        name, value = _split(spec)
        var = _env_name(value)
        out.append(f"{name}: {ENV_PREFIX}{var}" if var is not None else f"{name}: <redacted>")
    return out


def secret_name(name: str) -> bool:
    """Whether header ``name`` carries a credential (``Authorization``, ``Cookie``,
    ``X-Api-Key``, ``X-Auth-Token``, ...): its value is a secret even when literal."""
    low = name.lower()
    return any(part in low for part in _SECRET_PARTS)


def run_headers(
    specs: Iterable[str], api_key_env: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The run's headers: the ``--header`` ones (:func:`resolve_headers`) and, when
    ``--api-key-env`` names a set variable, ``Authorization: Bearer <its value>``."""
    out = resolve_headers(specs, environ)
    if api_key_env and (key := environ.get(api_key_env)):
        out["Authorization"] = f"Bearer {key}"
    return out


def secret_values(specs: Iterable[str], headers: Mapping[str, str]) -> list[str]:
    """The values of ``headers`` (:func:`run_headers`) that are secrets: those taken from
    the environment and those of a credential-like name (:func:`secret_name`), each also
    without its auth scheme (``Bearer x`` → ``x``), so a server echoing the bare token is
    caught too. Other literal values are not secrets (the module's docstring says why)."""
    from_env = {name.lower() for name in header_env_vars(specs)}
    out: list[str] = []
    for name, value in headers.items():
        if name.lower() in from_env or secret_name(name):
            out.append(value)
            scheme, space, rest = value.partition(" ")
            if space and rest.strip() and _TOKEN.match(scheme):
                out.append(rest.strip())
    return out


def secret_vars(specs: Iterable[str], api_key_env: str | None) -> list[str]:
    """The environment variables the secrets come from (every ``env:`` source and
    ``--api-key-env``): the ones a child process's environment loses, by name."""
    names = list(header_env_vars(specs).values())
    if api_key_env:
        names.append(api_key_env)
    return sorted(set(names))
