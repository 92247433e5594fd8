"""``--mix FILE``: a mixed load's workload classes, read from TOML and checked before the run.

The file holds ``[[class]]`` tables, each a workload class with its ``name`` (unique,
lowercase letters, digits, ``_`` and ``-``), its ``weight`` (above 0: its share is weight
÷ the sum) and that class's request fields, every one optional:

=========================  =================================================================
field                      what the class's requests send
=========================  =================================================================
``prompts``                a prompts file, as ``--prompts`` (relative to the mix file)
``synthetic_input_tokens`` synthetic prompts of about N tokens (calibrated with /tokenize)
``max_tokens``             the output limit
``response_format``        ``{type="json_schema", json_schema={name=..., schema={...}}}`` or
                           ``{type="json_object"}``: every answer is checked, as the gates
                           check theirs (``contract_error`` when it breaks)
``tools``, ``tool_choice`` OpenAI function tools; ``tool_choice`` ``required`` or a named
                           function makes a tool call the contract (chat API only)
``reasoning``              sent as ``reasoning_effort``
=========================  =================================================================

A field a class leaves unset comes from the run's own options (``--prompts`` or the run's
synthetic pool, ``--max-tokens``, ``--reasoning``); sampling options apply to every class.
Every error names the file, the class, the field, the value and what is allowed. The mix
is held in the config as read (``config.json`` and the record's ``config.mix``: its
classes, their weights and fields), so ``recover`` and ``verify`` need no file.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from loadgen.answer_contract import AnswerContract, ContractError
from loadgen.prompts import PromptPoolError, load_file
from soak.run.config_checks import file_problem

MAX_CLASSES: Final = 64
MAX_WEIGHT: Final = 1_000_000.0
MAX_TOKENS: Final = 10_000_000
MAX_TOOLS: Final = 128
CLASS_NAME: Final = re.compile(r"^[a-z0-9_-]{1,32}$")
_REASONING: Final = re.compile(r"^[a-z]{1,32}$")
FIELDS: Final = (
    "name",
    "weight",
    "prompts",
    "synthetic_input_tokens",
    "max_tokens",
    "response_format",
    "tools",
    "tool_choice",
    "reasoning",
)


class MixClass(BaseModel):
    """One workload class as the mix file gave it (paths made absolute)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    weight: float
    prompts: str | None = None
    synthetic_input_tokens: int | None = None
    max_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    reasoning: str | None = None


class MixSpec(BaseModel):
    """A mixed load: the file it was read from and its classes, in file order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    classes: list[MixClass]

    @property
    def names(self) -> tuple[str, ...]:
        """The class names, in file order."""
        return tuple(c.name for c in self.classes)


class _Where:
    """Where a problem is, for the words: the file, and the class."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.cls = ""

    def error(self, field: str, value: object, why: str) -> ValueError:
        shown = repr(value)
        shown = shown if len(shown) <= 120 else shown[:119] + "…"
        return ValueError(f"mix file {self.file!r}{self.cls}: {field} = {shown}: {why}")


def read_mix_value(value: Any, run: Mapping[str, Any]) -> Any:
    """``RunConfig.mix`` before validation: a path is read and checked, a table (a
    ``config.json`` read back) checked again; ``run`` holds the fields validated before
    it (``api``, ``thresholds``, ``matrix``) for the checks across options."""
    if value is None or isinstance(value, MixSpec):
        return value
    if isinstance(value, str | Path):
        spec = read_mix(Path(value))
    elif isinstance(value, Mapping) and isinstance(value.get("classes"), list):
        where = _Where(str(value.get("file", "?")))
        spec = MixSpec(file=where.file, classes=_classes(value["classes"], where, None))
    else:
        raise ValueError(f"give the path of a TOML mix file, not {type(value).__name__}")
    if run.get("matrix"):
        raise ValueError("a mix is a steady soak's load; the matrix builds its own: drop one")
    if run.get("arrival") == "trace":
        raise ValueError("a trace replay sends the trace's own requests, not a mix's: drop one")
    if (run.get("turns") or 1) > 1:
        raise ValueError("conversations (turns > 1) send from the run's pool, not a mix: drop one")
    if run.get("api") == "completions":
        for c in spec.classes:
            if c.tools is not None:
                where = _Where(spec.file)
                where.cls = f", class {c.name!r}"
                raise where.error("tools", "[…]", "tool calls need api = 'chat', not completions")
    return spec


def read_mix(path: Path) -> MixSpec:
    """The mix file at ``path``, checked; raises ``ValueError`` naming what is wrong."""
    where = _Where(str(path))
    if (why := file_problem(path)) is not None:
        raise ValueError(f"mix file {str(path)!r} {why}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"mix file {str(path)!r} cannot be read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"mix file {str(path)!r} is not valid TOML: {e}") from None
    extra = sorted(set(data) - {"class"})
    if extra:
        raise where.error(
            extra[0], data[extra[0]], "unknown key; a mix file holds [[class]] tables"
        )
    tables = data.get("class")
    if not isinstance(tables, list) or not tables:
        raise where.error("class", tables, "give at least one [[class]] table")
    return MixSpec(file=str(path), classes=_classes(tables, where, path.parent))


def _classes(tables: list[Any], where: _Where, base: Path | None) -> list[MixClass]:
    if len(tables) > MAX_CLASSES:
        raise where.error("class", f"{len(tables)} tables", f"at most {MAX_CLASSES} classes")
    out: list[MixClass] = []
    for i, table in enumerate(tables, 1):
        where.cls = f", class #{i}"
        if not isinstance(table, Mapping):
            raise where.error("class", table, "each [[class]] must be a table")
        cls = _one_class(table, where, base)
        if cls.name in {c.name for c in out}:
            raise where.error("name", cls.name, "given to two classes; each name once")
        out.append(cls)
    return out


def _one_class(table: Mapping[str, Any], where: _Where, base: Path | None) -> MixClass:
    name = table.get("name")
    if not isinstance(name, str) or not CLASS_NAME.match(name):
        raise where.error("name", name, "required: 1 to 32 of a-z, 0-9, '_' and '-'")
    where.cls = f", class {name!r}"
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        allowed = f"unknown field; allowed: {', '.join(FIELDS)}"
        raise where.error(unknown[0], table[unknown[0]], allowed)
    weight = table.get("weight")
    if not isinstance(weight, int | float) or not _number(weight) or not 0 < weight <= MAX_WEIGHT:
        raise where.error(
            "weight", weight, f"required: a number above 0, at most {MAX_WEIGHT:,.0f}"
        )
    prompts = _prompts(table.get("prompts"), where, base)
    tokens = _whole(table, "synthetic_input_tokens", where)
    if prompts is not None and tokens is not None:
        raise where.error("prompts", prompts, "exclusive with synthetic_input_tokens: choose one")
    tools = _tools(table.get("tools"), where)
    reasoning = table.get("reasoning")
    if reasoning is not None and not (isinstance(reasoning, str) and _REASONING.match(reasoning)):
        raise where.error("reasoning", reasoning, "1 to 32 lowercase letters, e.g. high")
    return MixClass(
        name=name,
        weight=float(weight),
        prompts=prompts,
        synthetic_input_tokens=tokens,
        max_tokens=_whole(table, "max_tokens", where),
        response_format=_response_format(table.get("response_format"), where),
        tools=tools,
        tool_choice=_tool_choice(table.get("tool_choice"), tools, where),
        reasoning=reasoning,
    )


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _whole(table: Mapping[str, Any], key: str, where: _Where) -> int | None:
    v = table.get(key)
    if v is not None and (
        isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS
    ):
        raise where.error(key, v, f"a whole number from 1 to {MAX_TOKENS:,}")
    return v


def _prompts(v: object, where: _Where, base: Path | None) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise where.error("prompts", v, "the path of a ShareGPT JSON or JSONL prompts file")
    path = Path(v) if base is None or Path(v).is_absolute() else base / v
    if (why := file_problem(path)) is not None:
        raise where.error("prompts", v, f"the file {str(path)!r} {why}")
    try:
        load_file(path)
    except PromptPoolError as e:
        raise where.error("prompts", v, str(e)) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise where.error("prompts", v, f"cannot be used: {e}") from None
    return str(path)


def _response_format(v: object, where: _Where) -> dict[str, Any] | None:
    if v is None:
        return None
    allowed = '{type="json_schema", json_schema={name="...", schema={...}}} or {type="json_object"}'
    if not isinstance(v, Mapping) or v.get("type") not in ("json_schema", "json_object"):
        raise where.error("response_format", v, f"give {allowed}")
    if v["type"] == "json_schema":
        js = v.get("json_schema")
        if not isinstance(js, Mapping) or not isinstance(js.get("schema"), Mapping):
            raise where.error("response_format.json_schema", js, "a table holding a schema table")
        try:
            AnswerContract.json_schema(js["schema"])
        except ContractError as e:
            raise where.error("response_format.json_schema.schema", "{…}", str(e)) from None
    return dict(v)


def _tools(v: object, where: _Where) -> list[dict[str, Any]] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v or len(v) > MAX_TOOLS:
        raise where.error("tools", v, f"a list of 1 to {MAX_TOOLS} function tools")
    for tool in v:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(fn, Mapping)
            or not isinstance(fn.get("name"), str)
        ):
            raise where.error(
                "tools", tool, 'each {type="function", function={name="...", parameters={...}}}'
            )
    try:  # each tool's parameters schema, as a tool-call contract will check the arguments
        AnswerContract.tool_call(v, "required")
    except ContractError as e:
        raise where.error("tools", "[…]", str(e)) from None
    return [dict(t) for t in v]


def _tool_choice(v: object, tools: list[dict[str, Any]] | None, where: _Where) -> Any:
    if v is None:
        return None
    if tools is None:
        raise where.error("tool_choice", v, "needs tools")
    if v in ("auto", "none", "required"):
        return v
    names = sorted({t["function"]["name"] for t in tools})
    if isinstance(v, Mapping) and v.get("type") == "function":
        fn = v.get("function")
        if isinstance(fn, Mapping) and fn.get("name") in names:
            return dict(v)
    raise where.error(
        "tool_choice",
        v,
        "'auto', 'none', 'required' or {type=\"function\", function={name=...}} naming one "
        f"of the class's tools: {', '.join(names)}",
    )


def redacted(mix: dict[str, Any]) -> dict[str, Any]:
    """A mix as ``config.json`` holds it under ``--redact``: no paths."""
    classes = [c | {"prompts": "<redacted>"} if c.get("prompts") else c for c in mix["classes"]]
    return mix | {"file": "<redacted>", "classes": classes}
