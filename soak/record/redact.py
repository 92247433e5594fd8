"""``--redact``: nothing private reaches the run directory; secrets never reach it at all.

One :class:`Redactor` per run. Every writer of the run directory passes what it writes
through it (journals line by line, evidence, identity, record, summary, runner.log), so no
writer has to remember to.

- **Secrets** (the API key) are replaced by ``<secret>`` with or without ``--redact``: a
  server log may print the key (vLLM logs its ``api_key`` argument), an error may echo it.
  Whole occurrences are replaced in every string; in serialized lines and files any run of
  8 or more characters of the key is too (a key cut by an excerpt, or split across a
  stream's chunks: see :mod:`soak.record.redact_stream` for how a stream's assembled text is
  scrubbed).
- **Private values** (``--redact`` only) become stable pseudonyms: ``gpu-3fa9c2d1``,
  ``host-…``, ``ip-…``, ``pci-…``, ``path-…``, ``url-…``, ``mig-…``, ``mac-…``,
  ``serial-…``, ``container-…``; the run's endpoints become ``<endpoint i>`` and its DCGM
  exporters ``<dcgm i>`` (their position in the configuration, which is how soaktop
  compares runs). Values are found two ways: by shape (:mod:`soak.record.redact_patterns`), and
  exactly, once soaktop has learned them (:meth:`Redactor.learn`; structured fields such as
  ``uuid``, ``host`` and ``pci_bus_id`` are learned as :meth:`Redactor.obj` meets them).

A pseudonym is a keyed hash (HMAC-SHA256) of the value under a per-machine salt kept
outside the run directory (:func:`soak.run.redaction.load_salt`): the same GPU has the same
pseudonym in every run made on that machine, distinct values get distinct pseudonyms, and
someone holding only run directories cannot reverse them, not even for values from a small
space (IPv4 addresses, ports) that an unkeyed hash would give away to a brute force.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets as _secrets
from collections.abc import Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel

from soak.record.redact_patterns import API_ROUTE, PATTERNS, ipv6, normalise
from soak.record.redact_stream import scrub_stream

Span = tuple[int, int, str]
"""``(start, end, replacement)`` of one private value in a string."""

M = TypeVar("M", bound=BaseModel)

SECRET = "<secret>"
FRAGMENT = 8
"""A run of this many characters of a secret is treated as the secret (in lines and files)."""

FIELDS = {
    "uuid": "gpu",
    "UUID": "gpu",
    "gpu_uuid": "gpu",
    "host": "host",
    "hostname": "host",
    "Hostname": "host",
    "pci_bus_id": "pci",
    "serial": "serial",
    "container": "container",
    "container_id": "container",
    "pod": "container",
}
"""Structured fields whose string value is private as a whole, whatever its shape."""

_PREFIX = {"ip6": "ip", "fqdn": "host"}
_MARKER = re.compile(r"<[^<>]*>")
"""A value that is already a marker such as ``<endpoint 0>`` (redacting twice changes
nothing; a pseudonym is recognised by exact membership in what this redactor issued, not by
its shape — a real host may well be called ``dgx-0a1b2c3d``)."""
_BEFORE = r"(?<![\w.-])"
_AFTER_URL = r"(?![\w-])"  # an endpoint URL may go on with a route: <endpoint 0>/v1/models
_AFTER = r"(?![\w/-]|\.\w)"  # anything else only as a whole token (a sentence's full stop ok)
_CACHE_MAX = 8192


class Redactor:
    """Scrubs strings, JSON-like values, serialized lines and models for one run.

    ``enabled`` is ``--redact``; without it only ``secrets`` are replaced. ``salt`` keys the
    pseudonyms (None: a random one, stable within this redactor only).
    """

    def __init__(
        self,
        endpoints: list[str],
        enabled: bool,
        secrets: list[str] | None = None,
        *,
        salt: bytes | None = None,
        dcgm: Iterable[str] = (),
    ) -> None:
        self.enabled = enabled
        self._salt = salt if salt is not None else _secrets.token_bytes(32)
        self._secrets = sorted({s for s in secrets or [] if len(s) >= 4}, key=len, reverse=True)
        self._grams = sorted(
            {s[i : i + FRAGMENT] for s in self._secrets for i in range(len(s) - FRAGMENT + 1)}
        )
        self._urls: dict[str, str] = {}
        self._known: dict[str, str] = {}
        self._regex: re.Pattern[str] | None = None
        self._cache: dict[str, str] = {}
        self._issued: set[str] = set()
        """Every pseudonym this redactor gave out (a second pass leaves them alone)."""
        if enabled:
            for prefix, urls in (("endpoint", endpoints), ("dcgm", list(dcgm))):
                for i, url in enumerate(urls):
                    self._learn_url(url, f"<{prefix} {i}>")

    # -- what the run has learned ------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether there is anything to scrub at all (writers skip the work otherwise)."""
        return self.enabled or bool(self._secrets)

    def pseudonym(self, kind: str, value: str) -> str:
        """The stable pseudonym of ``value`` of a kind (``gpu``, ``host``, ``path``...)."""
        prefix = _PREFIX.get(kind, kind)
        msg = f"{prefix}\0{normalise(kind, value)}".encode("utf-8", "surrogatepass")
        name = f"{prefix}-{hmac.new(self._salt, msg, hashlib.sha256).hexdigest()[:8]}"
        self._issued.add(name)
        return name

    def learn(self, kind: str, value: str | None) -> str | None:
        """Remember a private value found by soaktop (a DCGM host name, a GPU UUID, this
        machine's name): from now on it is replaced wherever it occurs. Returns its
        pseudonym (None for None). Without ``--redact`` the value is returned unchanged."""
        if value is None or not self.enabled:
            return value
        if value in self._issued or _MARKER.fullmatch(value):
            return value
        repl = self.pseudonym(kind, value)
        if len(value) >= 2 and self._known.get(value.lower()) != repl:
            self._known[value.lower()] = repl
            self._changed()
        return repl

    def learn_model(self, model: str) -> str:
        """The model name as written: a served model that is a path (``/models/llama``)
        keeps its last part, its directory becomes a pseudonym (``path-1a2b3c4d/llama``);
        a hub name (``org/model``) is public and stays."""
        if not self.enabled or not model.startswith(("/", "~", "./", "../")):
            return model
        head, _, base = model.rstrip("/").rpartition("/")
        repl = f"{self.pseudonym('path', head or '/')}/{base}"
        if self._known.get(model.lower()) != repl:
            self._known[model.lower()] = repl
            self._changed()
        return repl

    def _learn_url(self, url: str, marker: str) -> None:
        parts = urlsplit(url)
        for needle in (url.rstrip("/"), f"{parts.scheme}://{parts.netloc}", parts.netloc):
            if needle and needle not in ("://",):
                self._urls.setdefault(needle.lower(), marker)
        if parts.hostname and not re.fullmatch(r"[\d.]+|[0-9a-f:]+", parts.hostname, re.I):
            self.learn("host", parts.hostname)  # a name, not an address (those have a shape)
        self._changed()

    def _changed(self) -> None:
        self._regex = None
        self._cache.clear()

    def _pattern(self) -> re.Pattern[str]:
        if self._regex is None:
            groups = []
            for name, values in (("known_url", self._urls), ("known", self._known)):
                if values:
                    alts = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
                    after = _AFTER_URL if name == "known_url" else _AFTER
                    groups.append(f"(?P<{name}>{_BEFORE}(?:{alts}){after})")
            groups += [f"(?P<{kind}>{rx})" for kind, rx in PATTERNS]
            self._regex = re.compile("|".join(groups), re.IGNORECASE)
        return self._regex

    # -- strings -----------------------------------------------------------------------

    def spans(self, s: str) -> list[Span]:
        """Where ``s`` holds a secret or (with ``--redact``) a private value, and what
        replaces it; sorted, never overlapping."""
        found: list[Span] = []
        for secret in self._secrets:
            i = s.find(secret)
            while i >= 0:
                found.append((i, i + len(secret), SECRET))
                i = s.find(secret, i + len(secret))
        found = _merge(found)
        if not self.enabled:
            return found
        out: list[Span] = []
        pos = 0
        for a, b, repl in [*found, (len(s), len(s), "")]:
            out += self._private(s, pos, a)
            if b > a:
                out.append((a, b, repl))
            pos = b
        return out

    def _private(self, s: str, lo: int, hi: int) -> list[Span]:
        out: list[Span] = []
        for m in self._pattern().finditer(s, lo, hi):
            repl, end = self._render(m)
            if repl != m.group()[: end - m.start()]:
                out.append((m.start(), end, repl))
        return out

    def _render(self, m: re.Match[str]) -> tuple[str, int]:
        """The replacement of one match and where it ends (a path gives back a trailing
        full stop or comma: the end of a sentence, not of the path)."""
        kind, value, end = m.lastgroup or "", m.group(), m.end()
        if kind == "known_url":  # (a case folding lower() does not undo: still replaced)
            return self._urls.get(value.lower(), "<endpoint>"), end
        if kind == "known":
            return self._known.get(value.lower()) or self.pseudonym("host", value), end
        if kind == "url":
            route = m.group("urlpath") or ""
            if not route or API_ROUTE.fullmatch(route.split("?", 1)[0]):
                authority = value[: len(value) - len(route)]
                return self.pseudonym("url", authority) + route, end
            return self.pseudonym("url", value), end
        if kind == "ip6":
            return (self.pseudonym("ip6", value) if ipv6(value) else value), end
        if kind == "ip":
            port = m.group("port")
            addr = value.rsplit(":", 1)[0] if port else value
            return self.pseudonym("ip", addr) + (
                f":{self.pseudonym('port', port)}" if port else ""
            ), end
        if kind == "path":
            path = value.rstrip(".,;:")
            if API_ROUTE.fullmatch(path):
                return value, end
            return self.pseudonym("path", path), m.start() + len(path)
        return self.pseudonym(kind, value), end

    def text(self, s: str) -> str:
        """``s`` with every secret and (``--redact``) every private value replaced."""
        if not self.active or not s:
            return s
        short = len(s) <= 64
        if short and (hit := self._cache.get(s)) is not None:
            return hit
        out = _apply(s, self.spans(s))
        if short:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[s] = out
        return out

    def field(self, key: str, value: str) -> str:
        """A structured field's string value: a private field (``FIELDS``) is replaced as a
        whole and learned; any other is scrubbed as text."""
        kind = FIELDS.get(key) if self.enabled else None
        if kind is None:
            return self.text(value)
        if kind == "gpu" and value.upper().startswith("MIG-"):
            kind = "mig"
        return self.learn(kind, value) or value

    def obj(self, value: Any, key: str | None = None) -> Any:
        """A JSON-like value scrubbed: private fields whole (``FIELDS``), every other
        string, dictionary keys included, as text; the structure untouched."""
        if isinstance(value, str):
            return self.field(key, value) if key is not None else self.text(value)
        if isinstance(value, dict):
            return {
                (self.text(k) if isinstance(k, str) else k): self.obj(
                    v, k if isinstance(k, str) else None
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.obj(v) for v in value]
        return value

    # -- serialized --------------------------------------------------------------------

    def fragments(self, s: str) -> str:
        """``s`` with every run of ``FRAGMENT`` or more characters of a secret replaced."""
        marks: list[Span] = []
        for gram in self._grams:
            i = s.find(gram)
            while i >= 0:
                marks.append((i, i + FRAGMENT, SECRET))
                i = s.find(gram, i + 1)
        return _apply(s, _merge(marks)) if marks else s

    def json_line(self, line: bytes, option: int = 0) -> bytes:
        """One serialized JSON value (a journal line, a file) scrubbed: decoded and walked
        with :meth:`obj` (so escaped text is seen as the text it is), then any fragment of
        a secret removed. Unchanged values keep their exact bytes; a changed one is
        serialized again with orjson ``option`` (``OPT_INDENT_2`` for a file)."""
        if not self.active:
            return line
        data = line
        if self.enabled:
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                value = None
                text = line.decode("utf-8", "surrogateescape")
                data = self.text(text).encode("utf-8", "surrogateescape")
            if value is not None:
                clean = self.obj(value)
                if clean != value:
                    data = orjson.dumps(clean, option=option)
        return self.cut_secrets(data)

    def cut_secrets(self, data: bytes) -> bytes:
        """Serialized bytes with every secret and every fragment of one replaced (the last
        pass before a write; cheap: no pattern is searched)."""
        for secret in self._secrets:
            data = data.replace(secret.encode(), SECRET.encode())
        if self._grams:
            text = data.decode("utf-8", "surrogateescape")
            cut = self.fragments(text)
            if cut != text:
                data = cut.encode("utf-8", "surrogateescape")
        return data

    def file_text(self, text: str) -> str:
        """A whole text file (a CSV, a log copy, a traceback) scrubbed line by line."""
        if not self.active:
            return text
        return self.fragments("".join(self.text(ln) for ln in text.splitlines(keepends=True)))

    def model(self, m: M) -> M:
        """A pydantic model (identity, record) with every string scrubbed."""
        if not self.active:
            return m
        clean = self.json_line(m.model_dump_json().encode())
        return type(m).model_validate_json(clean)

    def body(self, text: str) -> str:
        """An HTTP response body as kept in evidence: a stream is scrubbed on the text its
        chunks assemble to (a key split across two chunks is still found), a JSON body on
        its decoded strings; then the whole as text."""
        if not self.active or not text:
            return text
        streamed = scrub_stream(text, self.spans, self.text)
        if streamed is not None:
            return self.fragments(streamed)  # every line of it scrubbed already
        if self.enabled and text.lstrip()[:1] in ("{", "["):
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
            else:
                clean = self.obj(value)
                if clean != value:
                    text = orjson.dumps(clean).decode()
        return self.fragments(self.text(text))


def _merge(spans: list[Span]) -> list[Span]:
    """Sorted spans with overlapping or touching ones joined (the first one's replacement)."""
    out: list[Span] = []
    for a, b, r in sorted(spans):
        if out and a <= out[-1][1]:
            pa, pb, pr = out[-1]
            out[-1] = (pa, max(pb, b), pr)
        else:
            out.append((a, b, r))
    return out


def _apply(s: str, spans: list[Span]) -> str:
    if not spans:
        return s
    parts, pos = [], 0
    for a, b, repl in spans:
        parts += [s[pos:a], repl]
        pos = b
    parts.append(s[pos:])
    return "".join(parts)
