"""HTTP(S) proxies: refused, explicitly.

soaktop measures the engine; a proxy between them would put its own queueing, buffering
(many proxies hold an SSE stream's bytes) and connection limits into every latency, and
its failures into the engine's. And the stack would split: httpx (the gates, the scrapes)
honours ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` by default, aiohttp (the load) does
not — the gates would go through the proxy while the load went direct. So a run whose
endpoint the environment would send through a proxy does not start: the error names the
variable, the proxy (credentials stripped) and the two ways out (unset it, or list the
host in ``NO_PROXY``). An endpoint that ``NO_PROXY`` covers runs, direct, as before.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

__all__ = ["proxy_problem", "strip_credentials"]


def strip_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part (for words and records): everything up
    to the last ``@`` goes, parsed or not, so a URL without a scheme, with a bad port or
    with a ``/`` in its password never shows any of the password."""
    if "@" not in url:
        return url
    scheme, sep, _ = url.partition("://")
    prefix = f"{scheme}{sep}" if sep and "@" not in scheme else ""
    return f"{prefix}***@{url.rpartition('@')[2]}"


def _proxies(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """scheme → (the variable, its proxy URL), as urllib and httpx read them (lower case
    wins over upper case; ``all_proxy`` for any scheme)."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in environ.items():
        low = name.lower()
        if value and low.endswith("_proxy") and low != "no_proxy":
            scheme = low[: -len("_proxy")]
            if scheme not in found or name == low:
                found[scheme] = (name, value)
    return found


def _bypassed(host: str, environ: Mapping[str, str]) -> bool:
    """``NO_PROXY`` covers ``host`` (urllib's reading of it: names, suffixes, ``*``)."""
    no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    if not no_proxy:
        return False
    if no_proxy.strip() == "*":
        return True
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        entry = entry.split(":")[0] if entry.count(":") == 1 else entry
        entry = entry.lstrip(".").removeprefix("*.")
        if entry and (host == entry or host.endswith("." + entry)):
            return True
    bypass = getattr(urllib.request, "proxy_bypass_environment", None)  # undocumented
    return bool(bypass(host, {"no": no_proxy})) if bypass is not None else False


def proxy_problem(endpoints: Iterable[str], environ: Mapping[str, str]) -> str | None:
    """Why the run cannot start with this environment's proxies, in words (None: no
    proxy applies to any endpoint)."""
    proxies = _proxies(environ)
    if not proxies:
        return None
    for url in endpoints:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        hit = proxies.get(parts.scheme) or proxies.get("all")
        if hit is None or _bypassed(host, environ):
            continue
        name, value = hit
        return (
            f"{name}={strip_credentials(value)} would carry requests to {host}: soaktop does "
            "not measure through a proxy (its queueing and buffering would be timed as the "
            f"engine's, and the load and the gates would take different paths); unset {name}, "
            f"or add {host} to NO_PROXY"
        )
    return None
