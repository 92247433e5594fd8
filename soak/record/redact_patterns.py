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
    ("path", r"(?<![\w.~:/#-])(?:~[\w.-]*)?/[a-z_.~@][\w@%+=~.-]*(?:/[\w@%+=~.-]+)*/?"),
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
