"""The classes of private value ``--redact`` recognises by their shape in free text.

Each class is one named group of a single alternation (one regex pass per string): URLs,
MIG and GPU UUIDs, PCI bus ids, MAC addresses, IPv6 and IPv4 addresses (with a port),
host names with a well-known suffix, and absolute or home-relative file paths. A match is
turned into a ``(kind, value)`` pair for :class:`soak.record.redact.Redactor` to pseudonymise, or
kept as it is (an API route such as ``/v1/models``, a time such as ``19:00:43`` that only
looks like an IPv6 address).

What has no recognisable shape (a bare host name such as ``node-7``, a serial number, a
container name) cannot be found here: the redactor learns those values where soaktop meets
them (DCGM labels, this machine's host name, the configuration) and replaces them exactly.
"""

from __future__ import annotations

import ipaddress
import re

_HEX = "[0-9a-f]"
_UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_HOST_SUFFIXES = (
    "local|localdomain|lan|internal|intranet|corp|home|arpa|svc|cluster|com|net|org|io|ai|cloud"
)

PATTERNS: tuple[tuple[str, str], ...] = (
    # scheme://authority, then an optional path (kept only when it is an API route)
    ("url", r"\b[a-z][a-z0-9+.-]{1,15}://[^\s/\"'<>\\(),;]*(?P<urlpath>/[^\s\"'<>\\(),;]*)?"),
    ("mig", rf"\bMIG-(?:GPU-)?{_UUID}(?:/\d+/\d+)?"),
    ("gpu", rf"\bGPU-{_UUID}\b"),
    ("pci", rf"(?<![\w.]){_HEX}{{4,8}}:{_HEX}{{2}}:{_HEX}{{2}}(?:\.[0-7])?(?![\w:])"),
    ("mac", rf"(?<![\w:.-])(?:{_HEX}{{2}}:){{5}}{_HEX}{{2}}(?![\w:-])"),
    ("ip6", r"(?<![\w:.-])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[\w.]+)?(?![\w:.-])"),
    ("ip", rf"(?<![\w.-])(?:{_OCTET}\.){{3}}{_OCTET}(?::(?P<port>\d{{1,5}}))?(?![\w-]|\.\d)"),
    (
        "fqdn",
        r"(?<![\w.@-])(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
        rf"(?:{_HOST_SUFFIXES})(?![\w-]|\.\w)",
    ),
    ("path", r"(?<![\w.~:/#%!-])(?:~[\w.-]*)?/[a-z_.~@][\w@%+=~.-]*(?:/[\w@%+=~.-]+)*/?"),
)
"""``(kind, regex)`` in the order they are tried at one position (case-insensitive)."""

API_ROUTE = re.compile(
    r"/(?:v\d+|metrics|health|healthz|ready|readyz|live|livez|ping|version|tokenize|detokenize"
    r"|generate|get_model_info|get_server_info|server_info|stats)(?:/[\w./-]*)?/?$",
    re.IGNORECASE,
)
"""An OpenAI or engine route: soaktop's own words (``/v1/models answered HTTP 404``)."""


def ipv6(value: str) -> str | None:
    """``value`` as a normalised IPv6 address, or None when it only looks like one (a time
    ``19:00:43``, a C++ scope ``a::b``)."""
    if not any(c in "0123456789abcdefABCDEF" for c in value):
        return None
    try:
        return ipaddress.IPv6Address(value.split("%", 1)[0]).compressed
    except ValueError:
        return None


def pci(value: str) -> str:
    """A PCI bus id normalised so that NVML's ``00000000:3B:00.0`` and a kernel line's
    ``0000:3b:00`` (same device) get the same pseudonym: domain, bus and device only."""
    parts = value.lower().split(":")
    if len(parts) == 3:
        dom, bus, dev = parts
        return f"{int(dom, 16):04x}:{bus}:{dev.split('.', 1)[0]}"
    return value.lower()


def normalise(kind: str, value: str) -> str:
    """The form of ``value`` that is hashed: equal devices and hosts written differently
    (case, a trailing dot, PCI domain width) get one pseudonym."""
    if kind in ("gpu", "mig", "mac", "host", "fqdn", "url"):
        return value.lower().rstrip(".")
    if kind == "pci":
        return pci(value)
    if kind == "ip6":
        return ipv6(value) or value.lower()
    if kind == "path":
        return value.rstrip("/") or "/"
    return value


# --- secrets in a launch command (``--server-cmd-file``) --------------------------------
# Scrubbed with or without --redact: a command line is where API keys and tokens are typed.

SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials"}
)
"""A name (flag, variable, header, JSON key) holding one of these as a whole word
(``--api-key``, ``HF_TOKEN``, ``db.password``) names a secret; ``tokens``, ``tokenizer``
and ``keyfile`` do not (``--max-num-batched-tokens`` is a number, ``--ssl-keyfile`` a path)."""
SECRET_MARK = "<secret>"

_VALUE = r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|(?!-)[^\s\"'\\,;}]+)"
_A = "[A-Za-z0-9]"
_SECRET_NAME = (
    rf"(?i:(?:{_A}+[-_.])*"
    rf"(?:{_A}*(?:password|passwd|secret){_A}*|key|apikey|token|pwd|credentials?"
    rf"|{_A}*(?:apikey|authtoken))(?:[-_.]{_A}+)*)"
)
"""What :func:`secret_name` accepts, as a pattern: the regexes below only ever match a
secret's name, so a harmless ``-b`` or ``X=`` can never swallow the secret after it."""
_ASSIGNMENT = re.compile(
    rf"(?<![\w.-])(?P<q>[\"']?)(?P<name>{_SECRET_NAME})(?P=q)(?P<sep>\s*[=:]\s*)" + _VALUE
)
"""``NAME=value`` (shell, ``docker -e``, ``.env``), ``name: value`` (YAML) and
``"name": "value"`` (JSON)."""
_FLAG = re.compile(
    rf"(?<![\w-])(?P<name>--?{_SECRET_NAME})(?P<sep>[ \t]*\\\n[ \t]*|[ \t]+|=)" + _VALUE
)
"""``--api-key X``, ``--api-key=X`` and ``--api-key \\`` with X on the next line."""
_HEADER = re.compile(
    r"(?i)\b(?P<name>(?:proxy-)?authorization|x-api-key|api-key)(?P<sep>\s*:\s*)"
    r"(?:(?P<scheme>bearer|basic|token|digest)\s+)?(?P<val>[^\s\"',;]+)"
)
"""``Authorization: Bearer …`` (curl ``-H``, an HTTP header dump)."""
_BEARER = re.compile(r"(?i)\b(?P<scheme>bearer)\s+(?P<val>[A-Za-z0-9._~+/=-]{8,})")
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]{1,15}://)(?P<val>[^\s/@\"']+)@")
"""``https://user:password@host``: the credentials, whatever the name around them."""
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b"
)
"""Well-known token shapes (Hugging Face, OpenAI, GitHub, GitLab, Slack, AWS), found
even where no name says "secret"."""


def secret_name(name: str) -> bool:
    """Whether a flag, variable or key name names a secret (``--api-key``, ``HF_TOKEN``,
    ``*_KEY``, ``*PASSWORD*``, ``x-api-key``)."""
    low = name.lower().lstrip("-")
    if any(w in low for w in ("password", "passwd", "secret")):
        return True
    words = set(re.split(r"[-_.]+", low))
    return bool(words & SECRET_WORDS) or low.endswith(("apikey", "api_key", "authtoken"))


_NO_VALUE = frozenset({"", "null", "None", "none", "true", "false", "True", "False"})


def _named(m: re.Match[str]) -> str:
    val = m.group("val")
    bare = val.strip("\"'")
    if not secret_name(m.group("name")) or bare.startswith(("$", "<", "-")) or bare in _NO_VALUE:
        return m.group(0)  # not a secret's name, a $VARIABLE, a marker, the next flag, null
    quote = val[0] if val[:1] in ("'", '"') else ""
    return m.group(0)[: m.start("val") - m.start(0)] + f"{quote}{SECRET_MARK}{quote}"


def _valued(m: re.Match[str]) -> str:
    if m.group("val").startswith(("$", "<")):
        return m.group(0)
    return m.group(0)[: m.start("val") - m.start(0)] + SECRET_MARK


def scrub_secrets(text: str) -> str:
    """``text`` (a server's launch command, a declared fact) with every credential
    replaced by ``<secret>``: URL credentials, auth headers, bearer tokens, the values of
    secret-named variables, flags and keys, and well-known token shapes. ``$VARIABLE``
    references stay (they name where a secret is, not the secret)."""
    text = _USERINFO.sub(lambda m: m.group("scheme") + SECRET_MARK + "@", text)
    text = _HEADER.sub(_valued, text)
    text = _BEARER.sub(_valued, text)
    text = _ASSIGNMENT.sub(_named, text)
    text = _FLAG.sub(_named, text)
    return _TOKEN_SHAPES.sub(SECRET_MARK, text)
