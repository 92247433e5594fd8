"""The base of the record's and the snapshot's typed sections: :class:`Section`.

The sections typed in schema 1.1 (telemetry, reconciliation, faults, thresholds, the live
gates, identity's host, GPUs, clock and prompt pool) were free-form JSON in 1.0. Their
models keep two promises to the JSON the writers produced then and produce now:

- **The same keys.** A key a writer leaves out at times (``per_engine`` with one engine
  behind an endpoint, ``client_errors`` when the client never failed a /health check)
  is listed in ``absent_unless_set``: it is dumped only when it was given, never as an
  invented ``null``. Every other field is always written.
- **Missing keys read as defaults.** Every field has one (None, empty), so a record an
  older writer made without some key still loads; the published schema still says which
  keys this version always writes (``soak.record.schema``).
- **Unknown keys are kept.** A key this version does not declare (one an older writer
  wrote, or a newer minor version added) is kept and dumped back, never refused: a
  reader must load any 1.x record (see :mod:`soak.record.models`). The tests hold the
  writers to the declared keys (``tests/core/test_record_schema.py``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class AbsentUnlessSet(BaseModel):
    """A model some of whose fields are dumped only when they were given (or assigned):
    the keys an older writer never wrote are not invented when its JSON is written back."""

    absent_unless_set: ClassVar[frozenset[str]] = frozenset()
    """Fields the writer leaves out at times: dumped only when given (or assigned)."""
    written_by_this_version: ClassVar[frozenset[str]] = frozenset()
    """Of those, the ones this version's writers always give: absent only from an older
    writer's JSON read back, so the published schema still requires them."""

    @model_serializer(mode="wrap")
    def _leave_out_what_was_not_given(
        self, handler: SerializerFunctionWrapHandler
    ) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for name in self.absent_unless_set - self.model_fields_set:
            out.pop(name, None)
        return out


class Section(AbsentUnlessSet):
    """A typed part of ``record.json`` or of a snapshot line (see the module docstring)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    def unknown_keys(self) -> dict[str, Any]:
        """The keys kept that this version does not declare (empty for what it writes)."""
        return dict(self.model_extra or {})


def undeclared_keys(value: object, where: str = "") -> list[str]:
    """Where, under ``value`` (a model, or lists and dicts of them), a section keeps a key
    no model declares: ``telemetry.engines[0].max_running``. Empty for what this version
    writes; the tests hold the writers and the fixtures to that."""
    out: list[str] = []
    if isinstance(value, BaseModel):
        out += [f"{where}.{key}".lstrip(".") for key in value.model_extra or {}]
        for name in type(value).model_fields:
            out += undeclared_keys(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            out += undeclared_keys(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += undeclared_keys(item, f"{where}[{i}]")
    return out
