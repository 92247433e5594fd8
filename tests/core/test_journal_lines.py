"""The journal lines' models (soak.record.journal_lines) and their published schema.

- ``RequestLine`` is exactly what ``request_line`` writes; the telemetry union picks its
  model by ``source``; events are read leniently (another version's keys and kinds) but a
  value of the wrong type is damage; an event's ``data`` is read through its kind's model.
- Writer conformance: every line of every journal of a real demo run (gates on, so
  ``probes.jsonl`` is there) validates against its model with unknown keys refused and
  against the published schema, closed; so a writer cannot drift from its model silently.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from loadgen.envelope import FailureClass, RequestResult
from probes.nvml import NvmlReader
from soak.record.events import Event
from soak.record.journal import request_line
from soak.record.journal_lines import (
    BarrierData,
    EngineLine,
    EventData,
    FaultData,
    HostLine,
    JournalLineError,
    NvmlLine,
    PhaseData,
    ProbeLine,
    RequestLine,
    TelemetryLine,
    ThresholdData,
    event_data,
    read_event,
    read_events,
)
from soak.record.schema import PUBLISHED
from soak.record.shape import undeclared_keys
from soak.record.snapshot import Snapshot
from tests.core.test_nvml import _watch, nvml  # noqa: F401 - nvml: the fake pynvml fixture
from tests.core.test_record_schema import problems, published, strict
from tests.e2e.conftest import only_run_dir, run_soaktop

JOURNALS: dict[str, tuple[str, Any]] = {
    "requests.jsonl": ("requests.schema.json", RequestLine),
    "events.jsonl": ("events.schema.json", Event),
    "probes.jsonl": ("probes.schema.json", ProbeLine),
    "telemetry.jsonl": ("telemetry.schema.json", TelemetryLine),
    "snapshots.jsonl": ("snapshot.schema.json", Snapshot),
}
"""Each journal → its published schema and its model."""
DATA_MODELS: dict[str, type[EventData]] = {
    "phase": PhaseData,
    "barrier": BarrierData,
    "threshold": ThresholdData,
    "fault": FaultData,
}

ROOT = Path(__file__).resolve().parents[2]
EVENT = {"t": 1.5, "wall": "2026-01-01T00:00:00.000+00:00", "kind": "phase", "message": "m"}


def _result(**kw: Any) -> RequestResult:
    base: dict[str, Any] = {"request_id": "r1", "worker": 2, "prompt_id": 7, "sent_ns": 10**9}
    return RequestResult(**(base | kw))


def test_a_request_line_is_exactly_what_request_line_writes() -> None:
    ok = _result(first_byte_ns=11 * 10**8, first_token_ns=12 * 10**8, end_ns=2 * 10**9)
    ok.status, ok.output_tokens, ok.chunks, ok.itl_ns = 200, 3, 3, [1_500_000, 2_000_000]
    cut = _result(failure=FailureClass.STREAM_CUT, failure_detail="reset at byte 90")
    for r in (ok, cut):
        raw = orjson.loads(request_line(r, origin_ns=0))
        assert set(raw) == set(RequestLine.model_fields) - RequestLine.absent_unless_set
        line = RequestLine.model_validate(raw)
        assert line.model_dump(mode="json") == raw
    assert RequestLine.model_validate(orjson.loads(request_line(cut, 0))).failure is (
        FailureClass.STREAM_CUT
    )
    with pytest.raises(ValidationError, match="extra"):
        RequestLine.model_validate(orjson.loads(request_line(ok, 0)) | {"new": 1})


def _keys_read_of(name: str, path: Path) -> set[str]:
    """The constant keys a module reads of the variable ``name``: ``name["k"]`` and
    ``name.get("k")``."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript):
            of, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr != "get" or not node.args:
                continue
            of, key = node.func.value, node.args[0]
        else:
            continue
        if isinstance(of, ast.Name) and of.id == name and isinstance(key, ast.Constant):
            keys.add(str(key.value))
    return keys


def test_the_request_readers_read_only_request_line_keys() -> None:
    # summary.py reads requests.jsonl as dicts (200k lines: no model per line); the
    # keys it reads are RequestLine's, so a renamed key cannot go unread silently.
    readers = (
        "soak/record/summary.py",
        "soak/after/request_facts.py",
        "soak/record/window_journal.py",
        "soak/after/shard_check.py",
    )
    for module in readers:
        read = _keys_read_of("line", ROOT / module)
        assert read, module
        assert read <= set(RequestLine.model_fields), (module, read - set(RequestLine.model_fields))


def test_a_telemetry_line_is_read_as_its_source_model() -> None:
    host = {
        "source": "host",
        "t": 2.0,
        "client": {"cpu_percent": 3.0, "rss_mb": 80.1, "threads": 4, "open_files": 9},
        "system": {"cpu_percent": 10.0, "cpus": 2, "load1": 0.5},
    }
    assert isinstance(TelemetryLine.parse(host), HostLine)
    scrape = {
        "source": "engine",
        "endpoint": 0,
        "t": 1.0,
        "engine": None,
        "values": {},
        "finished_by_reason": {},
        "error": "HTTP 503",
        "histograms": {},
        "cache_config": {},
        "engines": {},
    }
    assert isinstance(TelemetryLine.parse(scrape), EngineLine)
    with pytest.raises(ValidationError):
        TelemetryLine.parse(scrape | {"source": "tpu"})
    with pytest.raises(ValidationError):
        TelemetryLine.parse(host | {"pid": 3})


def test_an_nvml_unavailable_line_is_an_nvml_line() -> None:
    why = "NVML could not be opened: libnvidia-ml.so.1 not found"
    line = {"source": "nvml", "t": 0.2, "status": "unavailable", "error": why}
    assert isinstance(TelemetryLine.parse(line), NvmlLine)
    assert problems(strict(published("telemetry.schema.json")), line) == []


@pytest.mark.usefixtures("nvml")
async def test_the_nvml_watchs_lines_are_nvml_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NVML watch (pynvml faked: the one mock) writes its open, read, lost-GPU and
    failed-read lines as NvmlLine says, and its fault events' data as FaultData."""
    watch, _ = _watch(tmp_path)
    assert await watch.open()
    for _ in range(4):
        await watch.sample()

    def broken(self: NvmlReader) -> list[Any]:
        raise RuntimeError("binding exploded")

    monkeypatch.setattr(NvmlReader, "read", broken)
    await watch.sample()
    await watch.stop()
    closed = strict(published("telemetry.schema.json"))
    lines = [json.loads(x) for x in (tmp_path / "telemetry.jsonl").read_bytes().splitlines()]
    assert {"devices", "gpus", "error"} <= {k for x in lines for k in x}
    for n, raw in enumerate(lines, 1):
        assert problems(closed, raw) == [], f"line {n}"
        assert isinstance(TelemetryLine.parse(raw), NvmlLine)
    faults = [e for e in read_events(tmp_path / "events.jsonl") if e.kind == "fault"]
    assert faults and all(event_data(e, FaultData).source == "nvml" for e in faults)


def test_events_are_read_leniently_but_damage_is_refused(tmp_path: Path) -> None:
    ev = read_event(EVENT | {"data": {"phase": "load"}, "later_key": 1})
    assert ev is not None and ev.kind == "phase" and event_data(ev, PhaseData).phase == "load"
    no_words = read_event({k: v for k, v in EVENT.items() if k != "message"})
    assert no_words is not None and no_words.message == ""
    assert read_event(EVENT | {"kind": "a_newer_kind"}) is None  # another version's word
    assert read_event({k: v for k, v in EVENT.items() if k != "t"}) is None
    for damage in ({"t": "soon"}, {"data": "nope"}):
        with pytest.raises(JournalLineError, match=r"events\.jsonl"):
            read_event(EVENT | damage)
    path = tmp_path / "events.jsonl"
    path.write_bytes(json.dumps(EVENT).encode() + b"\n\x00garbage\n[1]\n" + b'{"t": 2')
    assert [e.t for e in read_events(path)] == [1.5]


def test_event_data_keeps_other_keys_and_refuses_wrong_types() -> None:
    barrier = Event.model_validate(
        EVENT | {"kind": "barrier", "data": {"workers_started": 2, "requested": 2, "x": 1}}
    )
    data = event_data(barrier, BarrierData)
    assert (data.requested, data.workers_started, data.failures) == (2, 2, {})
    assert data.model_extra == {"x": 1}
    assert event_data(Event.model_validate(EVENT), PhaseData).phase == "?"
    bad = Event.model_validate(EVENT | {"data": {"requested": "many"}})
    with pytest.raises(ValueError):
        event_data(bad, BarrierData)


def test_every_journal_has_a_published_schema() -> None:
    assert {name for name, _ in JOURNALS.values()} <= set(PUBLISHED)


# --- a real run ------------------------------------------------------------------------------


def _conforms(model: Any, raw: dict[str, Any]) -> BaseModel:
    """``raw`` as ``model`` (a line model refuses unknown keys itself; the typed
    sections inside one keep them, so they are looked for), written back as read."""
    value: BaseModel = model.model_validate(raw)
    assert undeclared_keys(value) == []
    if not isinstance(value, TelemetryLine):  # dataclasses inside write back all fields
        assert value.model_dump(mode="json") == raw
    return value


@pytest.mark.e2e
def test_every_line_of_every_journal_of_a_real_run_is_its_model(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    rc, text = run_soaktop("demo", "--headless", "--out", str(out), "--duration", "3", timeout=240)
    assert rc == 0, text[-3000:]
    run_dir = only_run_dir(out)
    kinds: set[str] = set()
    for journal, (schema_name, model) in JOURNALS.items():
        schema = published(schema_name)
        closed = strict(schema)
        lines = (run_dir / journal).read_bytes().splitlines()
        assert lines, f"{journal} is empty"
        for n, line in enumerate(lines, 1):
            raw = json.loads(line)
            where = f"{journal} line {n}"
            assert problems(schema, raw) == [], where
            assert problems(closed, raw) == [], where
            value = _conforms(model, raw)
            if isinstance(value, Event):
                kinds.add(value.kind)
                if value.kind in DATA_MODELS:
                    event_data(value, DATA_MODELS[value.kind])
    assert {"phase", "barrier"} <= kinds
    sources = {json.loads(x)["source"] for x in (run_dir / "telemetry.jsonl").open("rb")}
    assert {"engine", "host"} <= sources
