"""One verdict path: finalize, recover and verify reach the same reasons from one run.

The run is the demo's ``xid-mid-run`` scenario: an Xid 31 on GPU 1 of replica 1 half-way
through the load, seen by the DCGM exporter (a ``gpu_fault``) and in the replica's log (a
``server_fault``). Its run directory is then judged twice more, from the journals the
real runner wrote: by ``soaktop verify`` (which must catch a GPU fault reason removed or
reworded in the record) and by ``soaktop recover`` on a copy without its record (which
must give the faults the reasons finalize gave, not one reason of its own).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.conftest import only_run_dir, record, run_soaktop

pytestmark = pytest.mark.e2e

_FAULT_CODES = {"gpu_fault", "server_fault", "server_log_error"}


@pytest.fixture(scope="module")
def xid_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("xid")
    rc, text = run_soaktop(
        *("demo", "--headless", "--scenario", "xid-mid-run", "--duration", "6"),
        *("--concurrency", "8", "--no-gates", "--threshold", "ttft.p99<60s"),
        *("--out", str(out)),
        timeout=120,
    )
    assert rc == 1, text
    run_dir = only_run_dir(out)
    assert run_soaktop("verify", str(run_dir))[0] == 0
    return run_dir


def _copy(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest


def _fault_reasons(rec: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (r["code"], r["effect"], r["message"]) for r in rec["reasons"] if r["code"] in _FAULT_CODES
    )


def test_verify_rechecks_the_gpu_fault_reasons(xid_run: Path, tmp_path: Path) -> None:
    rec = record(xid_run)
    gpu = [r for r in rec["reasons"] if r["code"] == "gpu_fault"]
    assert len(gpu) == 1 and "Xid 31" in gpu[0]["message"], rec["reasons"]

    dropped = _copy(xid_run, tmp_path / "dropped")
    data = record(dropped)
    data["reasons"] = [r for r in data["reasons"] if r["code"] != "gpu_fault"]
    (dropped / "record.json").write_bytes(orjson.dumps(data))
    rc, text = run_soaktop("verify", str(dropped))
    assert rc == 1 and "the journals imply 'gpu_fault'" in text, text

    reworded = _copy(xid_run, tmp_path / "reworded")
    data = record(reworded)
    for r in data["reasons"]:
        if r["code"] == "gpu_fault":
            r["message"] = r["message"].replace("Xid 31", "Xid 45")
    (reworded / "record.json").write_bytes(orjson.dumps(data))
    rc, text = run_soaktop("verify", str(reworded))
    assert rc == 1 and "the record says 'gpu_fault'" in text and "Xid 45" in text, text

    waived = _copy(xid_run, tmp_path / "waived")
    data = record(waived)
    for r in data["reasons"]:
        if r["code"] == "gpu_fault":
            r["effect"] = "note"
    (waived / "record.json").write_bytes(orjson.dumps(data))
    rc, text = run_soaktop("verify", str(waived))
    assert rc == 1 and "is note, the journals imply failed" in text, text


def _without_times(reasons: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    # A server-log fault's time is the watcher's clock in the record, its event's (a few
    # microseconds later) in the journal: the same second but for a rounding edge.
    return [(c, e, re.sub(r"at load[+-]\d\d:\d\d:\d\d", "at load±T", m)) for c, e, m in reasons]


def test_recover_gives_the_faults_the_reasons_finalize_gave(xid_run: Path, tmp_path: Path) -> None:
    finalized = record(xid_run)
    dead = _copy(xid_run, tmp_path / "dead")
    for name in ("record.json", "summary.csv"):  # as if the runner died before writing them
        (dead / name).unlink()
    rc, text = run_soaktop("recover", str(dead))
    assert rc == 0, text
    recovered = record(dead)
    assert recovered["status"] == "ABORTED" and recovered["recovered"] is True
    codes = [r["code"] for r in recovered["reasons"]]
    assert "faults_before_death" not in codes, recovered["reasons"]
    want, have = _fault_reasons(finalized), _fault_reasons(recovered)
    assert {c for c, _, _ in want} == {"gpu_fault", "server_fault", "server_log_error"}, want
    assert [r for r in have if r[0] == "gpu_fault"] == [r for r in want if r[0] == "gpu_fault"]
    assert _without_times(have) == _without_times(want)
    # the threshold is judged from the journals too, as finalize judged it
    assert [t["state"] for t in recovered["thresholds"]] == ["ok"], recovered["thresholds"]
    rc, text = run_soaktop("verify", str(dead))
    assert rc == 0, text
