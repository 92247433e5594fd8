"""The line protocol between a sharded run's coordinator and its shard processes.

One host, one clock: ``time.perf_counter_ns`` is CLOCK_MONOTONIC on Linux, the same
clock in every process of the host, so a shard sends its raw nanoseconds and the
coordinator journals them against the run's origin with no offset (the shard's ``ready``
carries its clock reading, which the coordinator checks against its own). A shard on
another host has a ``ShardLink.clock_offset_ns`` (its clock minus the coordinator's):
every instant sent to it gets the offset added, every one received has it taken away.

Coordinator → shard (the shard's stdin), one JSON object a line: first the ``spec``
(everything the shard builds its client and workers from — headers included, which is
why it travels on a pipe and never in argv or a file), then commands: ``release``
(with ``t0``, the coordinator's release: an open loop's schedule origin), ``stop``,
``abort``, ``pause``, ``resume``, ``set`` (a concurrency), ``rate`` (an open loop's new
rate and the instant it holds from, ``at_s`` after ``t0``), ``step``, ``cancel``. End
of input is an abort: a shard never outlives its coordinator.

Shard → coordinator (its stdout): a finished request is a JSON *array* (the
:class:`~loadgen.envelope.RequestResult` fields in :data:`RESULT_FIELDS` order: no key
names, one ``orjson`` parse on the coordinator per request); everything else is a JSON
object with ``t``: ``ready``, ``released``, ``hb`` (heartbeat), ``issue_end``, ``done``.

Worker ``i`` of shard ``k`` of ``n`` is the run's worker ``i * n + k`` and its ``j``-th
request is the run's request number ``j * n + k``: the workers interleave, so a
concurrency target ``c`` (the run's workers below ``c`` issue) splits exactly as
:func:`share`, and the prompts are those the single process's sequence numbers pick.
In an open loop the schedule's arrival ``g`` is shard ``g % n``'s and is request ``g``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final

import orjson

from loadgen.envelope import FailureClass, RequestResult

RESULT_FIELDS: Final = tuple(f.name for f in fields(RequestResult) if f.name != "answer")
"""The result fields on the wire, in order (``answer``, a conversation's history, never:
conversations are not sharded)."""
_FAILURE: Final = RESULT_FIELDS.index("failure")
_SANITY: Final = RESULT_FIELDS.index("sanity")

READ_LIMIT: Final = 1 << 24
"""The coordinator's read buffer per shard (16 MiB): a result line with a long stream's
inter-token gaps runs to tens of kilobytes."""


def share(total: int, shards: int, index: int) -> int:
    """Shard ``index``'s part of ``total`` interleaved items (workers, a request count,
    a concurrency target): the items ``g < total`` with ``g % shards == index``."""
    if total <= index:
        return 0
    return (total - index + shards - 1) // shards


def global_index(local: int, shards: int, index: int) -> int:
    """The run's number for shard ``index``'s ``local``-th worker or request."""
    return local * shards + index


def shard_endpoints(endpoints: tuple[str, ...], shards: int, index: int) -> tuple[str, ...]:
    """The endpoint list a shard's workers index with their local number so that each
    uses the endpoint its global number would (``endpoints[g % len]``): entry ``i`` is
    ``endpoints[(i * shards + index) % len]``, periodic in ``len`` like the original."""
    n = len(endpoints)
    return tuple(endpoints[global_index(i, shards, index) % n] for i in range(n))


def encode_result(r: RequestResult, worker: int) -> bytes:
    """One finished request as a wire line (``worker``: its global number)."""
    values: list[Any] = [getattr(r, name) for name in RESULT_FIELDS]
    values[1] = worker  # RESULT_FIELDS[1] is "worker"
    return orjson.dumps(values) + b"\n"


def decode_result(line: bytes | list[Any]) -> RequestResult:
    """A wire line (or its parsed array) back into the result the shard measured."""
    values = orjson.loads(line) if isinstance(line, bytes) else line
    if len(values) != len(RESULT_FIELDS):
        raise ValueError(f"a result line holds {len(values)} fields, not {len(RESULT_FIELDS)}")
    if values[_FAILURE] is not None:
        values[_FAILURE] = FailureClass(values[_FAILURE])
    values[_SANITY] = tuple(values[_SANITY])
    return RequestResult(**dict(zip(RESULT_FIELDS, values, strict=True)))


def message(kind: str, **body: Any) -> bytes:
    """A control or status line: ``{"t": kind, ...}``."""
    return orjson.dumps({"t": kind, **body}) + b"\n"


def parse_line(line: bytes) -> RequestResult | dict[str, Any]:
    """A shard's stdout line: a result, or a status object (``t`` names it)."""
    value = orjson.loads(line)
    if isinstance(value, list):
        return decode_result(value)
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        raise ValueError(f"not a shard line: {line[:80]!r}")
    return value
