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
validator built once per class (~35 µs for a three-property schema, measured here). A
tool-call contract is one flag. The text kept is bounded (``ANSWER_MAX_BYTES``, 64 KiB of
JSON-escaped text): an answer past it cannot be checked whole, and is a contract failure
that says so ("too long to check"), never a silent pass.

Tool calls: the SSE parser keeps only *that* a tool-call delta arrived, not its arguments,
so a tool-call contract checks that a call came (a strict check of its arguments needs the
parser to keep them: not done).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import jsonschema
from jsonschema.exceptions import SchemaError

from loadgen.answer_text import ANSWER_MAX_BYTES, AnswerText
from loadgen.envelope import FailureClass, RequestResult
from loadgen.sanity import VisibleText, collected_text

__all__ = ["AnswerContract", "ContractError", "parse_strict"]

_REASON_MAX: Final = 240
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
    except json.JSONDecodeError as e:
        near = text[max(0, e.pos - 20) : e.pos + 20]
        what = e.msg.removesuffix(" at")
        if "control character" in e.msg.lower() and e.pos < len(text):
            what = f"raw control character U+{ord(text[e.pos]):04X} inside a string"
        raise _StrictJSONError(f"{what} at char {e.pos} (near {near!r})") from None


@dataclass(frozen=True)
class AnswerContract:
    """What every answer of one workload class must be (build with the class methods)."""

    kind: ContractKind
    schema: Mapping[str, Any] | None = None
    """``json_schema`` only: the schema the answer must validate against."""
    tool_choice: object = None
    """``tool_call`` only: the request's ``tool_choice`` (for the words)."""
    _validator: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any]) -> AnswerContract:
        """Strict JSON valid against ``schema``; raises :class:`ContractError` when the
        schema itself is not a valid JSON Schema (so a bad mix fails before the run)."""
        if not isinstance(schema, Mapping):
            raise ContractError(f"a JSON schema is an object, not {type(schema).__name__}")
        plain = dict(schema)
        validator_cls = jsonschema.validators.validator_for(
            plain, default=jsonschema.Draft202012Validator
        )
        try:
            validator_cls.check_schema(plain)
        except SchemaError as e:
            raise ContractError(f"not a valid JSON Schema: {_shorten(e.message)}") from None
        validator = validator_cls(plain, format_checker=validator_cls.FORMAT_CHECKER)
        return cls("json_schema", plain, _validator=validator)

    @classmethod
    def json_object(cls) -> AnswerContract:
        """Strict JSON whose value is an object (``response_format`` ``json_object``)."""
        return cls("json_object")

    @classmethod
    def tool_call(cls, tool_choice: object) -> AnswerContract:
        """At least one tool call (``tool_choice`` ``required`` or a named function)."""
        return cls("tool_call", tool_choice=tool_choice)

    def check(self, text: VisibleText | None, finish_reason: str | None) -> str | None:
        """Why the completed answer breaks the contract, in words; None when it holds.

        ``text`` is the stream's collected visible text (None: nothing visible arrived),
        an :class:`~loadgen.answer_text.AnswerText` as the client keeps it for such a
        request; one that ran past its bound cannot be checked whole: a failure."""
        if self.kind == "tool_call":
            if text is not None and text.tool_calls:
                return None
            choice = _shorten(repr(self.tool_choice))
            return f"no tool call in the answer (tool_choice {choice} requires one)"
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
            cut = (
                " (finish_reason 'length': max_tokens ended it)"
                if finish_reason == "length"
                else ""
            )
            return _shorten(f"not strict JSON{cut}: {e}")
        if self.kind == "json_object":
            return (
                None if isinstance(value, dict) else f"not a JSON object ({type(value).__name__})"
            )
        return self._schema_problem(value)

    def judge(
        self, result: RequestResult, text: VisibleText | None, scrub: Callable[[str], str]
    ) -> None:
        """Check a completed (``ok``) result's answer; a broken one becomes a
        ``contract_error`` (``scrub``: the client's filter for the failure detail) and
        loses its sanity flags, which only a success carries."""
        broken = self.check(text, result.finish_reason)
        if broken is not None:
            result.failure = FailureClass.CONTRACT
            result.failure_detail = scrub(broken)
            result.sanity = ()

    def _schema_problem(self, value: Any) -> str | None:
        # At most ERRORS_KEPT: an answer with thousands of violations must not cost the
        # measuring loop a list of them all (one is enough to fail it).
        found = itertools.islice(self._validator.iter_errors(value), ERRORS_KEPT)
        errors = sorted(found, key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        first = errors[0]
        where = "/" + "/".join(str(p) for p in first.absolute_path)
        extra = len(errors) - 1
        at_least = " or more" if len(errors) == ERRORS_KEPT else ""
        more = f" (+{extra}{at_least} more)" if extra else ""
        return _shorten(f"schema violation at {where}: {first.message}{more}")
