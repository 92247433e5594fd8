"""The outputs other tools read, through the real CLI, runner and simulated engine: the live
figures scraped over HTTP during a run (``--metrics-port``), the JUnit file and the step
summary written when it ends (``--junit``, ``--summary-md``)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import CLIENT_LAG, only_run_dir, record, run_args, run_soaktop, soaktop

pytestmark = pytest.mark.e2e

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[1] / "fixtures" / "junit.xsd")
NAME = re.compile(r"^soaktop_[a-z][a-z0-9_]*$")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """Family name → {(sample name, labels): value}; {} while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for fam in text_string_to_metric_families(text):
        assert NAME.match(fam.name), fam.name
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), fam.name
        if fam.type == "summary":
            assert fam.name.endswith("_seconds"), fam.name
        out[fam.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
    return out


def _completed(fams: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]) -> float:
    return fams.get("soaktop_requests", {}).get(
        ("soaktop_requests_total", (("outcome", "completed"),)), 0.0
    )


def test_live_figures_scraped_during_a_run_then_junit_and_summary(sim, tmp_path):
    port = _free_port()
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    args = run_args(sim, tmp_path / "runs", "--duration", "8", "--concurrency", "8")
    args += ["--metrics-port", str(port), "--junit", str(junit), "--summary-md", str(summary)]
    args += ["--threshold", "e2e.p99<60s", "--max-tokens", "32"]
    proc = soaktop(*args)
    seen: list[float] = []
    deadline = time.monotonic() + 60
    fams: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    while time.monotonic() < deadline and proc.poll() is None and len(seen) < 3:
        fams = _scrape(port)
        if (n := _completed(fams)) > (seen[-1] if seen else 0):
            seen.append(n)
        time.sleep(1.0)
    out, _ = proc.communicate(timeout=90)
    assert len(seen) >= 2, f"the requests counter never rose across scrapes: {seen}\n{out}"
    assert seen == sorted(seen) and seen[-1] > seen[0]  # a counter: it only rises
    # the figures a dashboard charts, in the names and units the docs give
    assert fams["soaktop_in_flight_requests"][("soaktop_in_flight_requests", ())] >= 0
    ttft = fams["soaktop_ttft_seconds"]
    assert ttft[("soaktop_ttft_seconds_count", ())] > 0
    assert 0 < ttft[("soaktop_ttft_seconds", (("quantile", "0.99"),))] < 60
    (info,) = fams["soaktop_run_info"]
    assert dict(info[1])["run_id"].startswith(sim.model)
    th = fams["soaktop_threshold_state"]
    assert th[("soaktop_threshold_state", (("state", "ok"), ("threshold", "e2e.p99<60s")))] == 1
    assert "soaktop_output_tokens_per_second" in fams and "soaktop_gate_tasks" in fams

    run_dir = only_run_dir(tmp_path / "runs")
    rec = record(run_dir)
    assert proc.returncode == rec["exit_code"], out
    if rec["status"] != "PASSED":  # a loaded 2-core machine: only the client may be blamed
        assert {r["code"] for r in rec["reasons"] if r["effect"] != "note"} <= CLIENT_LAG, out
    SCHEMA.validate(str(junit))
    root = ET.parse(junit).getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["run_id"] == rec["run_id"] and props["status"] == rec["status"]
    names = [c.get("name") for c in root.iter("testcase")]
    assert names[:2] == ["e2e.p99<60s", "verdict"]  # no gates: the threshold, the verdict
    assert summary.read_text().startswith(f"## soaktop: {rec['status']}")
    # the same file again from the run directory
    again = tmp_path / "again.xml"
    assert run_soaktop("junit", str(run_dir), "-o", str(again))[0] == 0
    assert again.read_bytes() == junit.read_bytes()
    rc, md = run_soaktop("summary-md", str(run_dir))
    assert rc == 0 and md == summary.read_text()


def test_a_metrics_port_in_use_is_a_usage_error_before_anything_runs(sim, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rc, out = run_soaktop(
            *run_args(sim, tmp_path / "runs", "--duration", "5", "--metrics-port", str(port))
        )
    assert rc == 2, out
    assert f"--metrics-port {port}: cannot listen on http://127.0.0.1:{port}/metrics" in out
    assert "nothing was run" in out
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_output_paths_are_checked_before_the_run(sim, tmp_path):
    missing = tmp_path / "no-such-dir" / "junit.xml"
    rc, out = run_soaktop(
        *run_args(sim, tmp_path / "runs", "--duration", "5", "--junit", str(missing))
    )
    assert rc == 2, out
    assert f"--junit {missing}: the directory {missing.parent} does not exist" in out
    assert not (tmp_path / "runs").exists()
    rc, out = run_soaktop(*run_args(sim, tmp_path / "runs", "--metrics-host", "example.com"))
    assert rc == 2 and "metrics_host" in out and "is not an IP address" in out, out


def test_junit_of_a_directory_without_a_record_says_why(tmp_path):
    rc, out = run_soaktop("junit", str(tmp_path))
    assert rc == 2 and "is not a soaktop run directory" in out, out
