"""The lenient reading of another soaktop version's record (``soak.after.record_view``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soak.after.record_view import read_leniently
from soak.record.models import RunRecord, Status
from soak.record.snapshot import Snapshot

FIXTURES = Path(__file__).parent.parent / "report" / "fixtures"


def _raw() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((FIXTURES / "post-load-500" / "record.json").read_text())
    return raw


def test_a_sound_record_reads_as_it_is() -> None:
    rec, error = read_leniently(RunRecord, _raw())
    assert rec is not None and error is None
    assert rec == RunRecord.model_validate(_raw())


def test_unknown_keys_are_left_out_and_missing_ones_read_as_empty() -> None:
    raw = _raw() | {"from_the_future": {"x": 1}}
    del raw["exit_code"], raw["load"]["requested_concurrency"]
    raw["load"]["ttft_s"]["p999"] = 1.0
    rec, error = read_leniently(RunRecord, raw)
    assert rec is not None and error is not None
    assert {e["loc"] for e in error.errors()} == {
        ("from_the_future",),
        ("exit_code",),
        ("load", "requested_concurrency"),
        ("load", "ttft_s", "p999"),
    }
    assert rec.exit_code == 0 and rec.load is not None and rec.load.requested_concurrency == 0
    assert rec.load.completed == _raw()["load"]["completed"]


def test_a_list_item_without_a_required_key_is_left_out() -> None:
    raw = _raw()
    del raw["phases"][1]["start_s"], raw["reasons"][0]["effect"]
    rec, _ = read_leniently(RunRecord, raw)
    assert rec is not None
    assert [p.name for p in rec.phases] == [
        p["name"] for i, p in enumerate(_raw()["phases"]) if i != 1
    ]
    assert len(rec.reasons) == len(_raw()["reasons"]) - 1


def test_a_missing_word_needs_a_fill_and_a_wrong_value_is_not_read() -> None:
    raw = _raw()
    del raw["status"]
    assert read_leniently(RunRecord, raw)[0] is None
    rec, _ = read_leniently(RunRecord, raw, fills={("status",): "INVALID"})
    assert rec is not None and rec.status is Status.INVALID
    wrong = _raw()
    wrong["load"]["completed"] = "many"
    assert read_leniently(RunRecord, wrong)[0] is None
    other_major = _raw() | {"schema_version": "2.0"}
    assert read_leniently(RunRecord, other_major)[0] is None


def test_a_journal_line_without_its_time_is_not_read() -> None:
    lines = (FIXTURES / "post-load-500" / "snapshots.jsonl").read_text().splitlines()
    line = json.loads(lines[-1])  # an older line: its windows lack itl_s and tpot_s
    snap, error = read_leniently(Snapshot, line, must_have=frozenset({("t",)}))
    assert snap is not None and error is not None and snap.load.window is not None
    assert snap.load.window.itl_s.p99 is None
    del line["t"]
    assert read_leniently(Snapshot, line, must_have=frozenset({("t",)}))[0] is None
