"""Generate a JSON value that satisfies a JSON Schema (the subset structured outputs use).

Supported: ``type`` (also a list), object ``properties``/``required``/
``additionalProperties``, array ``items``/``prefixItems``/``minItems``/``maxItems``, string
``enum``/``const``/``pattern``/``format``/``minLength``/``maxLength``, integer and number
bounds (inclusive and exclusive, ``multipleOf``), boolean, null, ``anyOf``/``oneOf`` (first
branch), ``allOf`` (merged), ``$ref`` into ``$defs``/``definitions``. A pattern the small
regex generator cannot honour yields a best-effort string and a note in ``notes``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from simengine import regexgen

_WORDS = (
    "alpha bravo cedar delta ember falcon garnet harbor indigo juniper kestrel lumen "
    "meadow nimbus onyx prairie quartz raven sierra tundra umber violet willow zephyr"
).split()
_MAX_DEPTH = 8


class SchemaGenerator:
    """Generates values for one root schema; ``notes`` lists what was best effort."""

    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root if isinstance(root, dict) else {}
        self.rng = rng
        self.notes: list[str] = []

    def value(self) -> Any:
        """One value for the root schema."""
        return self._value(self.root, 0)

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            ref = str(schema["$ref"])
            target: Any = self.root
            if ref.startswith("#"):
                for part in ref.lstrip("#").split("/"):
                    if part:
                        target = target.get(part, {}) if isinstance(target, dict) else {}
            else:
                self.notes.append(f"external $ref {ref} not followed")
                target = {}
            schema = target if isinstance(target, dict) else {}
            seen += 1
        return schema

    def _value(self, schema: Any, depth: int) -> Any:
        if schema is True or not isinstance(schema, dict):
            return self._string({}, depth)
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return self._value(schema[key][0], depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self._resolve(part) if isinstance(part, dict) else {}
                for k, v in part.items():
                    if k == "properties":
                        merged.setdefault("properties", {}).update(v)
                    elif k == "required":
                        merged["required"] = list(merged.get("required", [])) + list(v)
                    else:
                        merged.setdefault(k, v)
            return self._value(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            kind = non_null[0] if non_null else "null"
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                kind = "string"
        makers: dict[str, Callable[[dict[str, Any], int], Any]] = {
            "object": self._object,
            "array": self._array,
            "string": self._string,
            "integer": self._integer,
            "number": self._number,
            "boolean": lambda s, d: self.rng.random() < 0.5,
            "null": lambda s, d: None,
        }
        maker = makers.get(kind)
        if maker is None:
            self.notes.append(f"unknown type {kind!r}: produced a string")
            maker = self._string
        return maker(schema, depth)

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or (depth < _MAX_DEPTH and self.rng.random() < 0.5):
                out[name] = self._value(sub, depth + 1)
        for name in required - set(props):
            out[name] = self._value(schema.get("additionalProperties", {}), depth + 1)
        lo = int(schema.get("minProperties", 0))
        extra = schema.get("additionalProperties", True)
        i = 0
        while len(out) < lo and extra is not False:
            out[f"{self.rng.choice(_WORDS)}_{i}"] = self._value(
                extra if isinstance(extra, dict) else {}, depth + 1
            )
            i += 1
        return out

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix if isinstance(prefix, list) else []
        if depth >= _MAX_DEPTH:
            n = max(lo, 0)
        else:
            top = int(hi) if hi is not None else max(lo, len(prefix)) + 2
            n = self.rng.randint(min(max(lo, 1), top), max(top, lo))
        if hi is not None:
            n = min(n, int(hi))
        if items is False:
            n = min(n, len(prefix))
        out = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            out.append(self._value(sub, depth + 1))
        if schema.get("uniqueItems") and len({repr(v) for v in out}) != len(out):
            self.notes.append("uniqueItems not guaranteed")
        return out

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            return self._pattern_string(pattern, schema)
        fmt = schema.get("format")
        if fmt == "date-time":
            return f"2026-11-{self.rng.randint(1, 30):02d}T{self.rng.randint(0, 23):02d}:00:00Z"
        if fmt == "date":
            return f"2026-11-{self.rng.randint(1, 30):02d}"
        if fmt == "time":
            return f"{self.rng.randint(0, 23):02d}:{self.rng.randint(0, 59):02d}:00"
        if fmt == "email":
            return f"{self.rng.choice(_WORDS)}@example.com"
        if fmt in ("uri", "url"):
            return f"https://example.com/{self.rng.choice(_WORDS)}"
        if fmt == "uuid":
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        hi_n = int(hi) if hi is not None else max(lo, 3) + 20
        target = self.rng.randint(min(max(lo, 3), hi_n), max(min(hi_n, lo + 24), lo))
        words: list[str] = []
        while len(" ".join(words)) < target:
            words.append(self.rng.choice(_WORDS))
        text = " ".join(words)[:target].rstrip()
        while len(text) < lo:
            text += "x"
        return text

    def _pattern_string(self, pattern: str, schema: dict[str, Any]) -> str:
        # The regex generator draws repetition counts freely, so a pattern with its own
        # minLength/maxLength needs a few draws until one also fits the lengths.
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        text, ok = "", False
        for _ in range(16):
            text, ok = regexgen.generate(pattern, self.rng)
            if ok and lo <= len(text) and (hi is None or len(text) <= int(hi)):
                return text
        if not ok:
            self.notes.append(f"pattern {pattern!r} unsupported: best-effort string")
        else:
            self.notes.append(f"pattern {pattern!r} with length bounds: best-effort string")
        return text

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        lo, hi = self._bounds(schema, integer=True)
        step = schema.get("multipleOf")
        value = self.rng.randint(int(lo), int(hi))
        if isinstance(step, int) and step > 0:
            value = (value // step) * step
            if value < lo:
                value += step
        return value

    def _number(self, schema: dict[str, Any], depth: int) -> float | int:
        lo, hi = self._bounds(schema, integer=False)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            k = self.rng.randint(int(-(-lo // step)), int(hi // step))
            return round(k * step, 10)
        value = round(self.rng.uniform(lo, hi), 2)
        return min(max(value, lo), hi)

    @staticmethod
    def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float, float]:
        eps = 1 if integer else 0.01
        lo: float | None = _num(schema.get("minimum"))
        hi: float | None = _num(schema.get("maximum"))
        xlo = schema.get("exclusiveMinimum")
        xhi = schema.get("exclusiveMaximum")
        if isinstance(xlo, (int, float)) and not isinstance(xlo, bool):
            lo = xlo + eps if lo is None else max(lo, xlo + eps)
        if isinstance(xhi, (int, float)) and not isinstance(xhi, bool):
            hi = xhi - eps if hi is None else min(hi, xhi - eps)
        if lo is None and hi is None:
            lo, hi = 0, 100
        elif lo is None:
            lo = (hi or 0) - 100
        elif hi is None:
            hi = lo + 100
        assert lo is not None and hi is not None
        if integer:
            lo, hi = -(-lo // 1), hi // 1
        return lo, max(lo, hi)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value
