"""Records and snapshot lines written by the previous release still load.

``tests/fixtures/records/1.0/`` holds run directories the 1.0 release (commit 826e9e9)
wrote: a soak with gates and a matrix profile (how they were made: its README). Readers
accept every older minor version (``soak.record.models``): these load with today's models,
lose no key, gain none, and the readers that show them still work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soak.after.compare import read_run
from soak.cli.headless import final_report
from soak.record.models import (
    SCHEMA_VERSION,
    Identity,
    RunRecord,
    read_schema_version,
)
from soak.record.run_dir import RunDirError, load_run_record
from soak.record.shape import undeclared_keys
from soak.record.snapshot import Snapshot
from soak.record.summary_csv import summary_csv

RELEASE_1_0 = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "1.0"
RUNS = sorted(p for p in RELEASE_1_0.iterdir() if p.is_dir())


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_bytes())
    return data


def test_both_kinds_of_run_are_kept() -> None:
    assert [p.name for p in RUNS] == ["load", "matrix"]


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_a_1_0_record_loads_and_writes_back_what_it_held(run_dir: Path) -> None:
    raw = _json(run_dir / "record.json")
    assert raw["schema_version"] == 1  # 1.0 wrote an integer
    rec = load_run_record(run_dir)
    assert rec.schema_version == "1.0"
    assert undeclared_keys(rec) == []  # every key 1.0 wrote is a declared one
    back = rec.model_dump(mode="json")
    assert back.pop("schema_version") == "1.0"
    raw.pop("schema_version")
    assert back == raw  # no key lost, none invented, every value as it was
    if run_dir.name == "matrix":
        assert rec.matrix is not None and rec.matrix.cells
    else:
        assert rec.load is not None and rec.gates["before"]["json"].passed > 0
        assert rec.reconciliation.load is not None and rec.reconciliation.matched is True
    assert rec.telemetry.engines and rec.telemetry.gpus and rec.telemetry.coverage
    assert rec.identity is not None and rec.identity.gpus and rec.identity.host.python


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_1_0_identity_and_snapshot_lines_load(run_dir: Path) -> None:
    raw_identity = _json(run_dir / "identity.json")
    ident = Identity.model_validate(raw_identity)
    assert ident.model_dump(mode="json") == raw_identity and undeclared_keys(ident) == []
    lines = (run_dir / "snapshots.jsonl").read_bytes().splitlines()
    assert len(lines) == 3
    for line in lines:
        raw = json.loads(line)
        snap = Snapshot.model_validate(raw)
        assert snap.schema_version == "1.0" and undeclared_keys(snap) == []
        back = snap.model_dump(mode="json")
        del back["schema_version"], raw["schema_version"]
        assert back == raw
    assert Snapshot.model_validate_json(lines[1]).telemetry.coverage  # inside the load


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: p.name)
def test_the_readers_show_a_1_0_run(run_dir: Path, tmp_path: Path) -> None:
    rec = load_run_record(run_dir)
    report = final_report(rec, run_dir)
    assert "PASSED" in report and "record:" in report
    assert summary_csv(rec).decode().startswith("run_id,status,")
    view = read_run(run_dir)
    assert view.problems == [] and view.status == "PASSED"


def test_schema_versions_read_as_major_minor() -> None:
    assert read_schema_version(1) == "1.0"
    assert read_schema_version("1.0") == "1.0"
    assert read_schema_version("1.7") == "1.7"  # a newer minor: its known keys still read
    assert SCHEMA_VERSION.startswith("1.")
    with pytest.raises(ValueError, match=r"schema_version 2\.0 is not readable"):
        read_schema_version("2.0")


def test_a_record_of_another_major_version_is_refused_with_the_reason(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    raw = _json(RUNS[0] / "record.json") | {"schema_version": "2.0"}
    (run_dir / "record.json").write_text(json.dumps(raw))
    with pytest.raises(RunDirError, match="not readable by this soaktop"):
        load_run_record(run_dir)
    assert RunRecord.model_validate(raw | {"schema_version": 1}).schema_version == "1.0"
