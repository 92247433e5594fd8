"""The published JSON Schema of ``record.json`` and of each journal's line, generated
from the models (:class:`~soak.record.models.RunRecord`, :class:`~soak.record.snapshot.
Snapshot`, and the lines of :mod:`soak.record.journal_lines`: requests, events, probes,
telemetry) into the repository's ``schema/`` folder.

    python -m soak.record.schema --write   # regenerate schema/*.schema.json
    python -m soak.record.schema --check   # exit 1 when they are not what the models say

The schema describes a record as this version writes it: a key is *required* when the
writer always writes it (every field, except a section's ``absent_unless_set``:
:mod:`soak.record.shape`). Readers are more lenient than that (older minor versions
load: :mod:`soak.record.models`); the schema is the writer's side of the contract.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from soak.record.endurance import WindowFigures
from soak.record.events import Event
from soak.record.journal_lines import ProbeLine, RequestLine, TelemetryLine
from soak.record.models import SCHEMA_VERSION, RunRecord
from soak.record.snapshot import Snapshot

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schema"
"""``schema/`` at the repository's root (this file is ``soak/record/schema.py``)."""

PUBLISHED: dict[str, type[BaseModel]] = {
    "record.schema.json": RunRecord,
    "snapshot.schema.json": Snapshot,
    "requests.schema.json": RequestLine,
    "events.schema.json": Event,
    "probes.schema.json": ProbeLine,
    "telemetry.schema.json": TelemetryLine,
    "windows.schema.json": WindowFigures,
}
"""File name → the model it describes."""

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class WriterSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema, with ``required`` listing what the writer always writes."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        """One model's object schema: every property required, except the ones the
        model's writer leaves out at times (``absent_unless_set``)."""
        out = super().model_schema(schema)
        props = out.get("properties")
        if isinstance(props, dict):
            cls = schema["cls"]
            absent: frozenset[str] = getattr(cls, "absent_unless_set", frozenset())
            absent -= getattr(cls, "written_by_this_version", frozenset())
            required = [name for name in props if name not in absent]
            if required:
                out["required"] = required
            else:
                out.pop("required", None)
        return out


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The published schema of ``model`` (a dict, ready for ``json.dumps``)."""
    body = model.model_json_schema(schema_generator=WriterSchema)
    head = {
        "$schema": _DIALECT,
        # The journal lines carry no version of their own: they are the run directory's,
        # whose version record.json and each snapshot line carry.
        "$comment": f"run directory schema_version {SCHEMA_VERSION}; generated from the "
        "models by `python -m soak.record.schema --write` (do not edit by hand)",
    }
    return head | body


def rendered(model: type[BaseModel]) -> str:
    """The schema file's text: stable key order, two-space indent, a final newline."""
    return json.dumps(schema_of(model), indent=2, ensure_ascii=False) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The published files that are missing or differ from what the models say."""
    out = []
    for name, model in PUBLISHED.items():
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != rendered(model):
            out.append(name)
    return out


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every published schema file; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, model in PUBLISHED.items():
        path = directory / name
        path.write_text(rendered(model), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """``--write`` regenerates the files, ``--check`` exits 1 when one is stale."""
    parser = argparse.ArgumentParser(
        prog="python -m soak.record.schema",
        description="The JSON Schema of record.json and of each journal line, from the models.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", action="store_true", help="regenerate schema/*.schema.json")
    what.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="the schema folder")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.dir):
            print(f"wrote {path}")
        return 0
    behind = stale(args.dir)
    for name in behind:
        print(
            f"{args.dir / name} is not what the models say: "
            "run python -m soak.record.schema --write",
            file=sys.stderr,
        )
    return 1 if behind else 0


if __name__ == "__main__":
    raise SystemExit(main())
