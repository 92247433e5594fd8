"""The one lenient reader (``soak.record.lenient``) under both callers' policies: the
monitor's (show what it can of a live line) and the after-the-run readers' (never show a
damaged record as another version's). The callers' own tests are tests/tui/test_reader.py
and tests/core/test_record_view.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.record.lenient import read
from soak.record.models import Reason, RunRecord

FIXTURES = Path(__file__).parent.parent / "report" / "fixtures"

MONITOR: dict[str, Any] = {"on_wrong_type": "drop", "on_item_missing": "fill"}
AFTER: dict[str, Any] = {"on_wrong_type": "refuse", "on_item_missing": "drop"}


def _raw() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((FIXTURES / "post-load-500" / "record.json").read_text())
    return raw


def test_a_wrong_type_is_left_out_by_the_monitor_and_refused_after_the_run() -> None:
    raw = _raw()
    raw["load"]["completed"] = "many"
    shown = read(RunRecord, raw, **MONITOR)
    assert shown.repaired and shown.value is not None and shown.value.load is not None
    assert shown.value.load.completed == 0  # the model's default, not "many"
    after = read(RunRecord, raw, **AFTER)
    assert after.value is None and after.error is not None and not after.repaired


def test_an_item_missing_a_key_is_filled_by_the_monitor_and_left_out_after_the_run() -> None:
    raw = _raw()
    del raw["phases"][1]["start_s"]
    shown = read(RunRecord, raw, **MONITOR).value
    assert shown is not None and len(shown.phases) == len(raw["phases"])
    assert shown.phases[1].start_s == 0.0
    after = read(RunRecord, raw, **AFTER).value
    assert after is not None and len(after.phases) == len(raw["phases"]) - 1


@pytest.mark.parametrize("policy", [MONITOR, AFTER], ids=["monitor", "after"])
def test_an_item_left_out_takes_none_of_its_neighbours_with_it(policy: dict[str, Any]) -> None:
    # Two errors name the same item; leaving it out once must not shift the other error
    # onto the next item (the monitor's reader used to take the next reason's code).
    raw = _raw()
    del raw["reasons"][0]["effect"], raw["reasons"][0]["code"]
    rec = read(RunRecord, raw, **policy).value
    assert rec is not None and rec.reasons == [Reason.model_validate(_raw()["reasons"][1])]


@pytest.mark.parametrize("policy", [MONITOR, AFTER], ids=["monitor", "after"])
def test_what_no_policy_reads_past(policy: dict[str, Any]) -> None:
    assert read(RunRecord, _raw() | {"schema_version": "2.0"}, **policy).value is None
    no_status = _raw()
    del no_status["status"]  # a word: any placeholder would be invented
    assert read(RunRecord, no_status, **policy).value is None
    filled = read(RunRecord, no_status, **policy, fills={("status",): "INVALID"}).value
    assert filled is not None and filled.status == "INVALID"
    no_time = _raw()
    del no_time["started_at"]
    assert read(RunRecord, no_time, **policy).value is not None
    assert read(RunRecord, no_time, **policy, must_have=frozenset({("started_at",)})).value is None
    assert read(RunRecord, b"[1]", **policy).value is None
    assert read(RunRecord, b"{", **policy).value is None


def test_bytes_and_a_parsed_object_read_alike_and_the_object_is_left_as_it_was() -> None:
    raw = _raw() | {"from_the_future": 1}
    del raw["exit_code"]
    before = copy.deepcopy(raw)
    for policy in (MONITOR, AFTER):
        parsed = read(RunRecord, raw, **policy)
        from_bytes = read(RunRecord, orjson.dumps(raw), **policy)
        assert parsed.repaired and parsed.value == from_bytes.value
    assert raw == before
    sound = read(RunRecord, _raw(), **MONITOR)
    assert sound.value is not None and sound.error is None and not sound.repaired
