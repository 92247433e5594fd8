"""The published JSON Schema of record.json and snapshots.jsonl, and the typed sections.

- ``schema/*.schema.json`` is what the models say (``python -m soak.record.schema``).
- The schema validates the record and every snapshot line of a real demo run and of a real
  matrix run (the runner against the simulated engine), also with unknown keys refused.
- Fixture against writer: every run directory the monitor's and the report's tests read
  holds only keys the models declare, so a fixture cannot hold a shape no writer produces.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from probes.engine_metrics import VOCABULARY
from soak.record.models import SCHEMA_VERSION, Identity, RunRecord
from soak.record.schema import PUBLISHED, SCHEMA_DIR, main, schema_of, stale, write
from soak.record.sections import ReconciledWindow
from soak.record.shape import undeclared_keys
from soak.record.snapshot import Snapshot
from soak.record.telemetry import EngineSummary, EngineView
from tests.e2e.conftest import only_run_dir, run_soaktop

ROOT = Path(__file__).resolve().parents[2]
TUI_FIXTURES = sorted(p for p in (ROOT / "tests/tui/fixtures").iterdir() if p.is_dir())
REPORT_FIXTURES = sorted(p for p in (ROOT / "tests/report/fixtures").iterdir() if p.is_dir())
MATRIX = "input=64,256 concurrency=1,2 reps=2 requests=3 warmup=1"


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown keys refused wherever a model declares its keys (the open
    parts, e.g. the config echo and the engine's cache_config labels, stay open)."""
    out = copy.deepcopy(schema)

    def close(node: object) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                node["additionalProperties"] = False
            for child in node.values():
                close(child)
        elif isinstance(node, list):
            for child in node:
                close(child)

    close(out)
    return out


def published(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    return data


def problems(schema: dict[str, Any], doc: object) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}"
        for e in Draft202012Validator(schema).iter_errors(doc)
    ]


# --- the published files -------------------------------------------------------------------


def test_the_published_schema_is_what_the_models_say() -> None:
    assert stale() == [], "stale: run python -m soak.record.schema --write"
    done = subprocess.run(
        [sys.executable, "-m", "soak.record.schema", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_check_says_which_file_is_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(p.name for p in write(tmp_path)) == sorted(PUBLISHED)
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "snapshot.schema.json").write_text("{}\n")
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "snapshot.schema.json is not what the models say" in err
    assert "record.schema.json" not in err


def test_the_schema_requires_what_the_writer_always_writes() -> None:
    defs = schema_of(RunRecord)["$defs"]
    engine = defs["EngineSummary"]
    assert {"endpoint", "running_max", "server_ttft_s", "restarts"} <= set(engine["required"])
    assert not {"per_engine", "client_ttft_s", "ttft_gap_s"} & set(engine["required"])
    assert "matched" not in defs["Reconciliation"].get("required", [])
    assert defs["RecordTelemetry"].get("required") is None  # every section is optional
    top = schema_of(RunRecord)
    assert top["properties"]["schema_version"]["default"] == SCHEMA_VERSION
    # steps, classes, turns, sessions and sweep (1.4): only by a load that has them;
    # shards only by a sharded run (--shards)
    optional = {"steps", "classes", "turns", "sessions", "sweep", "shards"}
    assert set(top["required"]) == set(RunRecord.model_fields) - optional


def test_an_engine_view_declares_every_vocabulary_key() -> None:
    # A key added to probes.engine_metrics.VOCABULARY reaches every snapshot: declare it.
    declared = set(EngineView.model_fields) - {"endpoint", "status", "error", "t"}
    assert declared - {"server_ttft_s"} == set(VOCABULARY)


# --- exact shapes --------------------------------------------------------------------------


def test_a_section_writes_back_exactly_the_keys_it_was_given() -> None:
    why = "/metrics failed on endpoint(s) [1]"
    counter = {"status": "unavailable", "client": 3, "server": None, "why": why}
    unavailable: dict[str, object] = {
        "window": "gate phase start → end",
        "matched": None,
        "unavailable": why,
    }
    unavailable |= {"errors": {"endpoint 1 end": "HTTP 503"}}
    unavailable |= dict.fromkeys(("requests", "prompt_tokens", "generation_tokens"), counter)
    assert ReconciledWindow.model_validate(unavailable).model_dump(mode="json") == unavailable
    resets = unavailable | {"counter_resets": ["prompt_tokens_total on endpoint 0"]}
    assert ReconciledWindow.model_validate(resets).model_dump(mode="json") == resets
    at = {"endpoint": 0, "t_s": 12.5, "at": "at load+00:00:07"}
    restarted = unavailable | {"counter_resets": [at], "unfinished": 2}
    assert ReconciledWindow.model_validate(restarted).model_dump(mode="json") == restarted
    # present but null stays present; a later assignment is written
    engine = EngineSummary.model_validate({"endpoint": 0, "ttft_gap_s": None})
    assert "ttft_gap_s" in engine.model_dump() and "per_engine" not in engine.model_dump()
    engine.per_engine = []
    assert engine.model_dump()["per_engine"] == []
    # a key no model declares is kept (an older or newer writer's), and named
    kept = EngineSummary.model_validate({"endpoint": 1, "max_running": 3.0})
    assert kept.model_dump()["max_running"] == 3.0
    assert undeclared_keys(RunRecord.model_validate(_record_with_engine(kept))) == [
        "telemetry.engines[0].max_running"
    ]


def _record_with_engine(engine: EngineSummary) -> dict[str, Any]:
    return {
        "run_id": "r",
        "status": "PASSED",
        "exit_code": 0,
        "config": {},
        "telemetry": {"engines": [engine.model_dump(mode="json")]},
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:01:00Z",
    }


# --- fixtures against the writer ------------------------------------------------------------


@pytest.mark.parametrize("run_dir", TUI_FIXTURES + REPORT_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_run_holds_only_shapes_the_writer_produces(run_dir: Path) -> None:
    """The monitor's and the report's fixture runs against the models, unknown keys
    refused. (The report's snapshots were trimmed of their ITL/TPOT views on purpose,
    ``tests/report/fixtures/README.md``: a shape no writer produces, so only their records
    are held here; the monitor's are held whole.)"""
    rec = RunRecord.model_validate_json((run_dir / "record.json").read_bytes())
    assert undeclared_keys(rec) == []
    if (run_dir / "identity.json").exists():
        ident = Identity.model_validate_json((run_dir / "identity.json").read_bytes())
        assert undeclared_keys(ident) == []
    if run_dir in REPORT_FIXTURES:
        return
    lines = (run_dir / "snapshots.jsonl").read_bytes().splitlines()
    assert lines
    for n, line in enumerate(lines, 1):
        snap = Snapshot.model_validate_json(line)
        assert undeclared_keys(snap) == [], f"snapshots.jsonl line {n}"


# --- real runs ---------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    "profile",
    [
        ["--duration", "3", "--threshold", "ttft.p99<30s"],
        ["--no-gates", "--matrix", MATRIX, "--max-tokens", "16", "--ignore-eos"],
    ],
    ids=["demo", "matrix"],
)
def test_the_schema_validates_a_real_record_and_every_snapshot_line(
    tmp_path: Path, profile: list[str]
) -> None:
    out = tmp_path / "runs"
    rc, text = run_soaktop("demo", "--headless", "--out", str(out), *profile, timeout=240)
    assert rc == 0, text[-3000:]
    run_dir = only_run_dir(out)
    record_schema = published("record.schema.json")
    snapshot_schema = published("snapshot.schema.json")
    closed_record, closed_snapshot = strict(record_schema), strict(snapshot_schema)

    raw = json.loads((run_dir / "record.json").read_bytes())
    assert raw["schema_version"] == SCHEMA_VERSION
    assert problems(record_schema, raw) == []
    assert problems(closed_record, raw) == []
    rec = RunRecord.model_validate(raw)
    assert undeclared_keys(rec) == []
    assert rec.model_dump(mode="json") == raw  # the models write back what they read
    if "--matrix" in profile:
        assert rec.matrix is not None and rec.load is None
    else:
        assert rec.gates and rec.telemetry.engines and rec.reconciliation.load is not None
        assert [t.state for t in rec.thresholds] == ["ok"]

    lines = (run_dir / "snapshots.jsonl").read_bytes().splitlines()
    assert len(lines) >= 3
    for n, line in enumerate(lines, 1):
        snap = json.loads(line)
        assert problems(snapshot_schema, snap) == [], f"line {n}"
        assert problems(closed_snapshot, snap) == [], f"line {n}"
        assert Snapshot.model_validate(snap).model_dump(mode="json") == snap, f"line {n}"
