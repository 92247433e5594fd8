"""Probe suites as data: which requests a gate sends and what contract each answer must meet.

A suite is a JSON file (the built-in ones ship in ``probes/suites/``; ``--suite FILE``
adds or replaces one by name)::

    {"suite": "json", "kind": "json", "description": "...",
     "defaults": {"max_tokens": 256},
     "tasks": [{"id": "invoice", "prompt": "...", "schema": {...}}, ...]}

``kind`` says how a task is sent and judged (see ``probes.probe``):

- ``json``: chat completion with ``response_format`` json_schema (strict); the content must
  parse as strict JSON and validate against ``schema``; ``expect`` (JSON pointer → value)
  is checked only when expected values are switched on (capable models).
- ``tools`` / ``stream-tools``: chat completion with ``tools`` (strict), ``tool_choice``
  and ``parallel_tool_calls: false``; exactly one call of ``expect_function`` whose
  arguments parse and validate against that function's parameters schema.
  ``stream-tools`` sends the same tasks streamed and assembles the tool-call deltas.
- ``tool-result``: a tools task, then its call and ``tool_result`` go back; the assistant
  must answer with non-empty content and no error.
- ``smoke``: one short streamed completion; non-empty output and a usage block.
- ``needle``: a fact hidden at ``depth`` in filler text of ``context_tokens``; the answer
  must contain ``needle``.

A suite may take its tasks from another suite (``"tasks_from": "tools"``), so the streamed
and round-trip tool suites check exactly the tool tasks.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import jsonschema
import orjson
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ProbeKind = Literal["json", "tools", "stream-tools", "tool-result", "smoke", "needle"]

BUILTIN_SUITES = ("json", "tools", "stream-tools", "tool-result", "smoke", "needle")
"""Suites shipped with soaktop, in the order gates run them."""


class SuiteError(ValueError):
    """A suite file that cannot be used; ``str()`` names the file, the field and the value."""


class Task(BaseModel):
    """One probe: the request it sends and the contract its answer must meet."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Short name, unique in the suite (shown as ``json#7 (invoice)``)."""
    prompt: str = ""
    """The user message."""
    system: str | None = None
    """Optional system message."""
    max_tokens: int | None = Field(None, ge=1)
    """Overrides the suite default."""
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    """json: the JSON schema the content must validate against (sent as json_schema)."""
    expect: dict[str, Any] = Field(default_factory=dict)
    """json: JSON pointer → expected value, checked only when expected values are on."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """tools: OpenAI tool definitions (``{"type": "function", "function": {...}}``)."""
    tool_choice: str | dict[str, Any] = "required"
    """tools: ``required`` or ``{"type": "function", "function": {"name": ...}}``."""
    expect_function: str | None = None
    """tools: the one function that must be called."""
    expect_arguments: dict[str, Any] = Field(default_factory=dict)
    """tools: argument values checked only when expected values are on."""
    tool_result: Any = None
    """tool-result: what the tool returns (default ``{"ok": true}``)."""
    needle: str | None = None
    """needle: what the answer must contain (e.g. a code)."""
    needle_text: str = "The secret code is {needle}."
    """needle: the sentence hidden in the context (``{needle}`` is replaced)."""
    context_tokens: int | None = Field(None, ge=64)
    """needle: target prompt length in tokens."""
    depth: float = Field(0.5, ge=0.0, le=1.0)
    """needle: where the fact sits in the context (0 = start, 1 = end)."""


class Suite(BaseModel):
    """A named list of tasks of one probe kind."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    suite: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """The suite's name (``gates.<phase>.<suite>`` in the record)."""
    kind: ProbeKind
    """How its tasks are sent and judged."""
    description: str = ""
    defaults: dict[str, Any] = Field(default_factory=dict)
    """Request defaults, e.g. ``{"max_tokens": 256}``."""
    tasks: list[Task] = Field(default_factory=list)
    tasks_from: str | None = None
    """Take the tasks of this other suite (resolved when suites are loaded)."""
    source: str = ""
    """Where the suite came from (``builtin`` or the file path); set by the loader."""

    @model_validator(mode="after")
    def _check(self) -> Suite:
        if not self.tasks and not self.tasks_from:
            raise ValueError("a suite needs tasks or tasks_from")
        if self.tasks and self.tasks_from:
            raise ValueError("give tasks or tasks_from, not both")
        ids = [t.id for t in self.tasks]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"task ids must be unique; repeated: {', '.join(dupes)}")
        for t in self.tasks:
            _check_task(self.kind, t)
        return self


def _check_schema(where: str, schema: dict[str, Any]) -> None:
    """A broken schema is the suite's fault: refuse it before it can blame the server."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        path = "/".join(str(p) for p in e.absolute_path)
        raise ValueError(f"{where} is not a valid JSON schema at /{path}: {e.message}") from None


def _check_task(kind: str, t: Task) -> None:
    if kind == "json" and t.schema_ is None:
        raise ValueError(f"task {t.id!r}: a json task needs a schema")
    if t.schema_ is not None:
        _check_schema(f"task {t.id!r}: schema", t.schema_)
    if kind in ("tools", "stream-tools", "tool-result"):
        if not t.tools or not t.expect_function:
            raise ValueError(f"task {t.id!r}: a tools task needs tools and expect_function")
        names = [f.get("function", {}).get("name") for f in t.tools]
        if t.expect_function not in names:
            raise ValueError(
                f"task {t.id!r}: expect_function {t.expect_function!r} is not one of the "
                f"tools ({', '.join(map(str, names))})"
            )
        for f in t.tools:
            params = f.get("function", {}).get("parameters")
            if isinstance(params, dict):
                _check_schema(f"task {t.id!r}: parameters of {f['function'].get('name')}", params)
        if isinstance(t.tool_choice, dict):
            named = (t.tool_choice.get("function") or {}).get("name")
            if named != t.expect_function:
                raise ValueError(
                    f"task {t.id!r}: tool_choice names {named!r} but expect_function is "
                    f"{t.expect_function!r}"
                )
        elif t.tool_choice not in ("required", "auto"):
            raise ValueError(
                f"task {t.id!r}: tool_choice = {t.tool_choice!r}; use 'required', 'auto' or "
                '{"type": "function", "function": {"name": ...}}'
            )
    if kind == "needle" and (not t.needle or not t.context_tokens):
        raise ValueError(f"task {t.id!r}: a needle task needs needle and context_tokens")


def _describe(err: Any) -> str:
    """One pydantic error as ``field = value: message``."""
    where = ".".join(str(p) for p in err["loc"])
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or not where else f" = {value!r}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}{shown}: {msg}" if where else msg


def _parse(data: bytes, source: str) -> Suite:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise SuiteError(f"suite {source}: not valid JSON: {e}") from None
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(_describe(err) for err in e.errors())
        raise SuiteError(f"suite {source}: {problems}") from None
    return suite.model_copy(update={"source": source})


def builtin_suite(name: str) -> Suite:
    """A suite shipped in ``probes/suites/``."""
    if name not in BUILTIN_SUITES:
        raise SuiteError(
            f"suite {name!r} is not built in; choose from {', '.join(BUILTIN_SUITES)} "
            "or give a file with --suite"
        )
    data = resources.files("probes.suites").joinpath(f"{name}.json").read_bytes()
    return _parse(data, "builtin")


def suite_file(path: Path) -> Suite:
    """A user suite file."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SuiteError(f"suite file {str(path)!r} cannot be read: {e.strerror}") from None
    return _parse(data, str(path))


def load_suites(names: list[str], files: list[Path]) -> dict[str, Suite]:
    """The suites to run, by name, in order; files add suites or replace built-in ones.

    ``tasks_from`` is resolved against the files first, then the built-in suites.
    """
    extra = {s.suite: s for s in (suite_file(p) for p in files)}
    out: dict[str, Suite] = {}
    for name in names:
        out[name] = extra[name] if name in extra else builtin_suite(name)
    for s in extra.values():  # a file names its own suite: running it is implied
        out.setdefault(s.suite, s)
    for name, s in list(out.items()):
        if s.tasks_from:
            where = f"suite {name} ({s.source})"
            try:
                base = extra.get(s.tasks_from) or builtin_suite(s.tasks_from)
            except SuiteError as e:
                raise SuiteError(f"{where}: tasks_from = {s.tasks_from!r}: {e}") from None
            if base.tasks_from:
                raise SuiteError(f"{where}: tasks_from {s.tasks_from!r} has no tasks itself")
            tasks = list(base.tasks)
            for t in tasks:
                try:
                    _check_task(s.kind, t)
                except ValueError as e:
                    raise SuiteError(f"{where}, tasks from {s.tasks_from}: {e}") from None
            # The borrowed tasks keep their suite's request defaults unless this one sets any.
            defaults = s.defaults or base.defaults
            out[name] = s.model_copy(update={"tasks": tasks, "defaults": defaults})
    return out
