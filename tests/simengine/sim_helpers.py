"""Client-side helpers for the simengine tests: SSE reading, metric scraping, schema checks.

These read the simulator the way a client would (raw HTTP on loopback, Prometheus text
parsed with prometheus_client's parser), and validate JSON against schemas with an
independent checker (no code shared with the generator).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

FAST = {
    "decode_ms_base": 2.0,
    "decode_ms_per_seq": 0.0,
    "prefill_us_per_token": 0.0,
    "log_interval_s": 0.5,
}


@dataclass
class Stream:
    """What a streaming client received."""

    status: int
    content_type: str
    events: list[str] = field(default_factory=list)  # data payloads, in order
    raw: bytes = b""

    def json_events(self) -> list[dict[str, Any]]:
        """Every data payload that parses as JSON (skips [DONE] and broken ones)."""
        out = []
        for e in self.events:
            try:
                out.append(json.loads(e))
            except json.JSONDecodeError:
                continue
        return out

    def chunks(self) -> list[dict[str, Any]]:
        """JSON chunks that have a ``choices`` list with one choice."""
        return [e for e in self.json_events() if e.get("choices")]

    def usage(self) -> dict[str, int] | None:
        """The usage of the usage chunk, if any."""
        for e in self.json_events():
            if e.get("usage") and e.get("choices") == []:
                usage: dict[str, int] = e["usage"]
                return usage
        return None

    def content(self) -> str:
        """Concatenated delta.content (chat) or text (completions)."""
        out = []
        for c in self.chunks():
            ch = c["choices"][0]
            out.append((ch.get("delta") or {}).get("content") or ch.get("text") or "")
        return "".join(out)

    def token_chunks(self) -> list[dict[str, Any]]:
        """Chunks carrying a token: non-empty content/text/reasoning, or a tool-call delta."""
        out = []
        for c in self.chunks():
            ch = c["choices"][0]
            d = ch.get("delta") or {}
            if d.get("content") or d.get("reasoning") or d.get("tool_calls") or ch.get("text"):
                out.append(c)
        return out


def parse_sse(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body (events end with a blank line)."""
    events = []
    for block in raw.split(b"\n\n"):
        block = block.strip(b"\n")
        if block.startswith(b"data: "):
            events.append(block[6:].decode())
    return events


async def stream(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    request_id: str | None = None,
    path: str = "/v1/chat/completions",
) -> Stream:
    """POST a streaming request and read it to the end."""
    headers = {"X-Request-Id": request_id} if request_id else {}
    body = {"stream": True, "stream_options": {"include_usage": True}, **body}
    async with session.post(url + path, json=body, headers=headers) as r:
        raw = await r.read()
        return Stream(r.status, r.headers.get("Content-Type", ""), parse_sse(raw), raw)


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    body: Any,
    path: str = "/v1/chat/completions",
    request_id: str | None = None,
) -> tuple[int, Any]:
    """POST a JSON body; (status, decoded JSON or raw text)."""
    headers = {"X-Request-Id": request_id} if request_id else {}
    async with session.post(url + path, json=body, headers=headers) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except json.JSONDecodeError:
            return r.status, text


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """``/metrics`` as families keyed by name."""
    async with session.get(url) as r:
        assert r.status == 200
        text = await r.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """Sum of the samples named ``sample`` whose labels include ``labels``."""
    fam_name = re.sub(r"_(total|created|bucket|sum|count)$", "", sample)
    fam = families.get(fam_name) or families.get(sample)
    assert fam is not None, f"no family for {sample}"
    total = 0.0
    found = False
    for s in fam.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
            found = True
    assert found, f"no sample {sample} {labels}"
    return total


def chat_body(text: str = "Hello there, world!", **kw: Any) -> dict[str, Any]:
    """A minimal chat request."""
    return {"model": "tiny-sim", "messages": [{"role": "user", "content": text}], **kw}


# -- an independent JSON Schema checker for the subset the simulator claims ------------------
def schema_errors(instance: Any, schema: Any, root: Any = None, path: str = "$") -> list[str]:
    """Violations of ``schema`` by ``instance`` (empty list: valid)."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: schema false"]
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return schema_errors(instance, target, root, path)
    errs: list[str] = []
    if "const" in schema and instance != schema["const"]:
        errs.append(f"{path}: != const")
    if "enum" in schema and instance not in schema["enum"]:
        errs.append(f"{path}: not in enum")
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(
            not schema_errors(instance, s, root, path) for s in schema[key]
        ):
            errs.append(f"{path}: matches no {key} branch")
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        checks = {
            "object": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
        }
        if not any(checks[t](instance) for t in types):
            return [*errs, f"{path}: not of type {types}"]
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in instance:
                errs.append(f"{path}: missing {name}")
        for name, v in instance.items():
            if name in props:
                errs += schema_errors(v, props[name], root, f"{path}.{name}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: extra property {name}")
    if isinstance(instance, list):
        if len(instance) < schema.get("minItems", 0):
            errs.append(f"{path}: too few items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errs.append(f"{path}: too many items")
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(instance):
                errs += schema_errors(v, schema["items"], root, f"{path}[{i}]")
    if isinstance(instance, str):
        if len(instance) < schema.get("minLength", 0):
            errs.append(f"{path}: too short")
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errs.append(f"{path}: too long")
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            errs.append(f"{path}: {instance!r} does not match {schema['pattern']}")
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            errs.append(f"{path}: below minimum")
        if "maximum" in schema and instance > schema["maximum"]:
            errs.append(f"{path}: above maximum")
        if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
            errs.append(f"{path}: not above exclusiveMinimum")
        if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
            errs.append(f"{path}: not below exclusiveMaximum")
    return errs
