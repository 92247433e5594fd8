"""The contract a mixed load's workload class puts on its answers, checked at a stream's end.

A class of a ``--mix`` that asks for structured output (``response_format`` with a
``json_schema``, or ``json_object``) or requires a tool call (``tool_choice`` ``required``
or a named function) holds the server to it on every one of its load requests, as the
gates hold their probes (:mod:`probes.contract`): an answer that is not strict JSON, does
not validate against the schema, or carries no tool call where one is required is a
*contract* failure (``contract_error``), not an availability one — the server answered,
completely, but not what the request asked for.

Same rules as the gates. Strict JSON is RFC 8259 and nothing more (no NaN/Infinity, no raw
control character inside a string, no duplicate keys, nothing after the value); the schema
is checked by the ``jsonschema`` library (Draft 2020-12 unless the schema names another),
formats included. loadgen may not import probes, so the strict parse is repeated here,
word for word in its reasons.

Cost, on the measuring loop, once per request of a class with a contract and never for any
other request: the answer's text is decoded once from the bytes the sanity collector keeps
anyway (:mod:`loadgen.answer_text`), parsed (~3 µs for a small object) and validated by a
validator built once per class (~35 µs for a three-property schema, measured here). The
text kept is bounded (``ANSWER_MAX_BYTES``, 64 KiB of JSON-escaped text): an answer past it
cannot be checked whole, and is a contract failure that says so ("too long to check"),
never a silent pass.

Tool calls are held to the tools gate's standard (:func:`probes.contract.check_tool_calls`):
the SSE parser hands a request of a tool-call class its tool-call deltas
(:mod:`loadgen.tool_call_text`, merged per ``index``, bounded the same way), and each call
must name a declared tool (the one ``tool_choice`` names, when it names one), with
``arguments`` that are a strict JSON object valid against that tool's ``parameters``
(any object for a tool without ``parameters``; a validator built once per tool, when the
contract is built: an invalid schema is a :class:`ContractError` naming the tool, before
the run). Calls are checked in ``index`` order and the first problem is the reason:
"tool call 0 get_weather: schema violation at /city: …". Unlike the gate, which sends
``parallel_tool_calls: false`` and wants exactly one call, a load class may get several:
each is checked, and there must be at least one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import jsonschema
from jsonschema.exceptions import SchemaError

from loadgen.answer_text import ANSWER_MAX_BYTES, AnswerText
from loadgen.envelope import FailureClass, RequestResult
from loadgen.sanity import VisibleText, collected_text
from loadgen.tool_call_text import MAX_CALLS, TOOL_CALLS_MAX_BYTES, ToolCall, ToolCallText

__all__ = ["AnswerContract", "ContractError", "parse_strict"]

_REASON_MAX: Final = 240
_TOO_DEEP: Final = "arrays or objects nested too deeply to check"
ERRORS_KEPT: Final = 16
"""Schema violations collected per answer before the first (by path) is reported."""
ContractKind = Literal["json_schema", "json_object", "tool_call"]


class ContractError(ValueError):
    """A contract that cannot be built (an invalid schema); the message says why."""


class _StrictJSONError(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _StrictJSONError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _shorten(text: str) -> str:
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 1] + "…"


def parse_strict(text: str) -> Any:
    """``text`` parsed as strict JSON; raises ``ValueError`` saying why not (the words of
    ``probes.contract.parse_strict``)."""
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except _StrictJSONError:
        raise
    except RecursionError:
        # Thousands of nested brackets fit in a few KB: the server's answer, not a bug in
        # soaktop (uncaught, the client would journal it as its own failure).
        raise _StrictJSONError(_TOO_DEEP) from None
    except json.JSONDecodeError as e:
        near = text[max(0, e.pos - 20) : e.pos + 20]
        what = e.msg.removesuffix(" at")
        if "control character" in e.msg.lower() and e.pos < len(text):
            what = f"raw control character U+{ord(text[e.pos]):04X} inside a string"
        raise _StrictJSONError(f"{what} at char {e.pos} (near {near!r})") from None


def _validator_for(schema: object, what: str) -> Any:
    """A validator of ``schema`` (formats checked), built once; :class:`ContractError`
    (``what`` names the schema's owner) when it is no valid JSON Schema."""
    if not isinstance(schema, Mapping):
        raise ContractError(f"{what}a JSON schema is an object, not {type(schema).__name__}")
    plain = dict(schema)
    validator_cls = jsonschema.validators.validator_for(
        plain, default=jsonschema.Draft202012Validator
    )
    try:
        validator_cls.check_schema(plain)
    except SchemaError as e:
        raise ContractError(_shorten(f"{what}not a valid JSON Schema: {e.message}")) from None
    return validator_cls(plain, format_checker=validator_cls.FORMAT_CHECKER)


def _schema_problem(validator: Any, value: Any) -> str | None:
    """The first violation (by path) of ``value``, in the gates' words; None: valid."""
    # At most ERRORS_KEPT: an answer with thousands of violations must not cost the
    # measuring loop a list of them all (one is enough to fail it).
    try:
        found = list(itertools.islice(validator.iter_errors(value), ERRORS_KEPT))
    except RecursionError:  # a recursive schema walking a deep value: still the answer's
        return f"{_TOO_DEEP} against the schema"
    errors = sorted(found, key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = "/" + "/".join(str(p) for p in first.absolute_path)
    extra = len(errors) - 1
    at_least = " or more" if len(errors) == ERRORS_KEPT else ""
    more = f" (+{extra}{at_least} more)" if extra else ""
    return f"schema violation at {where}: {first.message}{more}"


def _length_cut(finish_reason: str | None) -> str:
    return " (finish_reason 'length': max_tokens ended it)" if finish_reason == "length" else ""


@dataclass(frozen=True)
class AnswerContract:
    """What every answer of one workload class must be (build with the class methods)."""

    kind: ContractKind
    schema: Mapping[str, Any] | None = None
    """``json_schema`` only: the schema the answer must validate against."""
    tool_choice: object = None
    """``tool_call`` only: the request's ``tool_choice`` (for the words)."""
    _validator: Any = field(default=None, repr=False, compare=False)
    _tools: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """``tool_call`` only: each declared tool's arguments validator (None: no parameters)."""

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any]) -> AnswerContract:
        """Strict JSON valid against ``schema``; raises :class:`ContractError` when the
        schema itself is not a valid JSON Schema (so a bad mix fails before the run)."""
        validator = _validator_for(schema, "")
        return cls("json_schema", dict(schema), _validator=validator)

    @classmethod
    def json_object(cls) -> AnswerContract:
        """Strict JSON whose value is an object (``response_format`` ``json_object``)."""
        return cls("json_object")

    @classmethod
    def tool_call(cls, tools: Sequence[Mapping[str, Any]], tool_choice: object) -> AnswerContract:
        """At least one tool call (``tool_choice`` ``required`` or a named function), each
        of a declared tool with arguments valid against its ``parameters``.

        Raises :class:`ContractError`, naming the tool, when a tool is not an OpenAI
        function tool or its ``parameters`` is no valid JSON Schema, and when
        ``tool_choice`` names a function that is not among ``tools``."""
        validators: dict[str, Any] = {}
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                shown = _shorten(repr(tool))
                raise ContractError(
                    f"a tool is {{type='function', function={{name=...}}}}: {shown}"
                )
            name = fn["name"]
            params = fn.get("parameters")
            what = f"tool {name}: parameters: "
            validators[name] = None if params is None else _validator_for(params, what)
        if not validators:
            raise ContractError("a tool-call contract needs at least one tool")
        named = _named_function(tool_choice)
        if named is not None and named not in validators:
            raise ContractError(_shorten(f"tool_choice names {named!r}, not one of the tools"))
        return cls("tool_call", tool_choice=tool_choice, _tools=validators)

    def collector(self) -> ToolCallText | None:
        """What the SSE parser must keep for this contract beyond the visible text: the
        tool calls (a ``tool_call`` contract), else None (the parser keeps nothing more)."""
        return ToolCallText() if self.kind == "tool_call" else None

    def check(
        self,
        text: VisibleText | None,
        finish_reason: str | None,
        calls: ToolCallText | None = None,
    ) -> str | None:
        """Why the completed answer breaks the contract, in words; None when it holds.

        ``text`` is the stream's collected visible text (None: nothing visible arrived),
        an :class:`~loadgen.answer_text.AnswerText` as the client keeps it for such a
        request; one that ran past its bound cannot be checked whole: a failure.
        ``calls``: the answer's tool calls (a ``tool_call`` contract's; None: none kept)."""
        if self.kind == "tool_call":
            return self._tool_call_problem(calls, finish_reason)
        if text is None or not text.raw:
            tools = text is not None and text.tool_calls
            return "a tool call instead of JSON content" if tools else "no content in the answer"
        if isinstance(text, AnswerText):
            if text.truncated:
                return f"answer too long to check: past {ANSWER_MAX_BYTES // 1024} KiB of text"
            answer = text.answer()
        else:  # a collector without a bound of its own (tests): what it holds
            answer = collected_text(bytes(text.raw))
        try:
            value = parse_strict(answer)
        except ValueError as e:
            return _shorten(f"not strict JSON{_length_cut(finish_reason)}: {e}")
        if self.kind == "json_object":
            return (
                None if isinstance(value, dict) else f"not a JSON object ({type(value).__name__})"
            )
        problem = _schema_problem(self._validator, value)
        return None if problem is None else _shorten(problem)

    def judge(
        self,
        result: RequestResult,
        text: VisibleText | None,
        scrub: Callable[[str], str],
        calls: ToolCallText | None = None,
    ) -> None:
        """Check a completed (``ok``) result's answer; a broken one becomes a
        ``contract_error`` (``scrub``: the client's filter for the failure detail) and
        loses its sanity flags, which only a success carries."""
        broken = self.check(text, result.finish_reason, calls)
        if broken is not None:
            result.failure = FailureClass.CONTRACT
            result.failure_detail = scrub(broken)
            result.sanity = ()

    def _tool_call_problem(
        self, calls: ToolCallText | None, finish_reason: str | None
    ) -> str | None:
        """The first call (in index order) that breaks a ``tool_call`` contract, in words."""
        if calls is not None and calls.broken is not None:
            return _shorten(f"unreadable tool call: {calls.broken}")
        if calls is not None and calls.truncated:
            return (
                f"tool calls too long to check: past {TOOL_CALLS_MAX_BYTES // 1024} KiB of "
                f"arguments or {MAX_CALLS} calls"
            )
        assembled = calls.calls() if calls is not None else []
        if not assembled:
            choice = _shorten(repr(self.tool_choice))
            return f"no tool call in the answer (tool_choice {choice} requires one)"
        named = _named_function(self.tool_choice)
        for call in assembled:
            problem = self._call_problem(call, named, finish_reason)
            if problem is not None:
                return _shorten(problem)
        return None

    def _call_problem(self, call: ToolCall, named: str | None, finish: str | None) -> str | None:
        """What is wrong with one call (``named``: the function ``tool_choice`` names)."""
        index, name = call.index, call.name
        if not name:
            return f"tool call {index} has no function name"
        if named is not None and name != named:
            shown = _shorten(repr(name))
            return f"tool call {index} names {shown}, not {named} (tool_choice names it)"
        if name not in self._tools:
            shown, declared = _shorten(repr(name)), ", ".join(self._tools)
            return f"tool call {index} names {shown}, not a declared tool (declared: {declared})"
        try:
            value = parse_strict(call.arguments)
        except ValueError as e:
            return f"tool call {index} {name}: arguments not strict JSON{_length_cut(finish)}: {e}"
        if not isinstance(value, dict):
            return f"tool call {index} {name}: arguments not a JSON object ({type(value).__name__})"
        validator = self._tools[name]
        problem = None if validator is None else _schema_problem(validator, value)
        return None if problem is None else f"tool call {index} {name}: {problem}"


def _named_function(tool_choice: object) -> str | None:
    """The function a ``tool_choice`` names (``{type: function, function: {name}}``), if any."""
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return str(fn["name"])
    return None
