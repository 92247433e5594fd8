"""``--metrics-port``: a snapshot as Prometheus exposition, served on loopback from the
collector's own thread, in Prometheus's naming conventions; the sample Grafana dashboard
charts only metrics the exporter writes."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from soak.record.snapshot import Snapshot
from soak.run.metrics_export import (
    MetricsExport,
    MetricsExportError,
    exposure_warning,
    families,
    host_problem,
    start_export,
)

HOSTILE = 'x"\\\n\x1b[2J'
DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"


def _stats(p50: float, n: int) -> dict[str, Any]:
    return {"p50": p50, "p90": p50 * 2, "p99": p50 * 3, "max": p50 * 4, "mean": p50, "n": n}


def _view(completed: int) -> dict[str, Any]:
    return {
        "span_s": 10.0,
        "completed": completed,
        "failed": 2,
        "output_tokens": completed * 100,
        "requests_per_s": completed / 10,
        "output_tokens_per_s": completed * 10.0,
        **{f"{k}_s": _stats(0.1, completed) for k in ("ttft", "e2e", "itl", "tpot")},
    }


def _snapshot(completed: int = 50) -> Snapshot:
    return Snapshot.model_validate(
        {
            "seq": 3,
            "t": 42.0,
            "wall": "",
            "run_id": "m__" + HOSTILE,
            "phase": "load",
            "phase_elapsed_s": 30.0,
            "client": {"cpu_percent": 55.0, "rss_mb": 100.0, "loop_lag_s": 0.002},
            "load": {
                "requested_concurrency": 8,
                "workers_started": 8,
                "in_flight": 7,
                "issued": completed + 9,
                "completed": completed,
                "failed": 2,
                "failures_by_class": {"http_5xx": 1, HOSTILE: 1},
                "window": _view(completed // 5),
                "cumulative": _view(completed),
            },
            "gates": {"before": {"json": {"passed": 23, "total": 24, "done": 24, "failed": 1}}},
            "thresholds": [
                {
                    "expr": "ttft.p99<1s",
                    "condition": "p99 TTFT < 1 s",
                    "metric": "ttft.p99",
                    "state": "breached",
                    "observed": 1.5,
                    "limit": 1.0,
                    "source": "live",
                }
            ],
            "endurance": {
                "window_s": 60,
                "windows": 9,
                "figures": [{"figure": "ttft_p99", "change": 0.31, "state": "breached"}],
                "leaks": [{"resource": "rss", "rate_per_h": 12.0, "unit": "MB"}],
            },
        }
    )


def _parse(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _exposition(snap: Snapshot) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    class One(Collector):
        def collect(self) -> list[Metric]:
            return families(snap)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())
    return generate_latest(reg).decode()


def test_names_units_and_types_follow_prometheus_conventions():
    fams = _parse(_exposition(_snapshot()))
    for name, fam in fams.items():
        assert re.fullmatch(r"soaktop_[a-z][a-z0-9_]*", name), name
        if fam.type == "counter":
            assert all(s.name == f"{name}_total" for s in fam.samples), name
        if "latency" in fam.documentation or fam.type == "summary":
            assert name.endswith("_seconds"), name
    req = {s.labels["outcome"]: s.value for s in fams["soaktop_requests"].samples}
    assert req == {"completed": 50, "failed": 2, "cancelled": 0}
    ttft = {s.labels.get("quantile", s.name): s.value for s in fams["soaktop_ttft_seconds"].samples}
    assert ttft["0.99"] == pytest.approx(0.3) and ttft["soaktop_ttft_seconds_count"] == 50
    assert ttft["soaktop_ttft_seconds_sum"] == pytest.approx(5.0)
    assert fams["soaktop_client_cpu_ratio"].samples[0].value == pytest.approx(0.55)
    assert fams["soaktop_client_resident_memory_bytes"].samples[0].value == 100 * 2**20
    drift = fams["soaktop_drift_change_ratio"].samples[0]
    assert drift.labels == {"figure": "ttft_p99"} and drift.value == pytest.approx(0.31)
    state = {s.labels["state"]: s.value for s in fams["soaktop_threshold_state"].samples}
    assert state == {"ok": 0, "breached": 1, "no_data": 0}


def test_label_values_from_a_server_are_made_safe_and_still_parse():
    text = _exposition(_snapshot())
    assert "\x1b" not in text
    fams = _parse(text)
    (info,) = fams["soaktop_run_info"].samples
    assert info.labels["run_id"] == "m__" + 'x"\\\\n\\x1b[2J'  # the escapes, shown
    classes = {s.labels["class"] for s in fams["soaktop_request_failures"].samples}
    assert classes == {"http_5xx", 'x"\\\\n\\x1b[2J'}


def test_missing_figures_are_left_out_not_zero():
    snap = Snapshot.model_validate(
        {
            **{"seq": 0, "t": 1.0, "wall": "", "run_id": "r", "phase": "identity"},
            **{"phase_elapsed_s": 1.0, "client": {}, "load": {"requested_concurrency": 4}},
        }
    )
    fams = _parse(_exposition(snap))
    assert "soaktop_ttft_seconds" not in fams and "soaktop_requests" not in fams  # no load yet
    started = _snapshot(50).model_copy(deep=True)
    started.load.window = None  # the load released, no full second in the window yet
    assert not _parse(_exposition(started))["soaktop_ttft_seconds"].samples[2:]  # no quantile
    assert "soaktop_client_cpu_ratio" not in fams and "soaktop_drift_change_ratio" not in fams
    assert "soaktop_output_tokens_per_second" not in fams


def test_served_over_http_from_the_latest_published_snapshot():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    export = start_export("127.0.0.1", port)
    assert export is not None
    try:
        url = export.url()

        def scrape() -> dict[str, Any]:
            with urllib.request.urlopen(url, timeout=5) as r:
                return _parse(r.read().decode())

        assert "soaktop_requests" not in scrape()  # nothing published yet: no figures
        export.publish(_snapshot(50))
        first = scrape()
        export.publish(_snapshot(80))
        second = scrape()
        done = [
            {s.labels["outcome"]: s.value for s in f["soaktop_requests"].samples}["completed"]
            for f in (first, second)
        ]
        assert done == [50, 80]
        with pytest.raises(MetricsExportError, match=f"--metrics-port {port}: cannot listen"):
            start_export("127.0.0.1", port)  # the port is taken
    finally:
        export.stop()
    assert start_export("127.0.0.1", None) is None


def test_only_loopback_goes_without_a_warning_and_hosts_are_addresses():
    assert exposure_warning("127.0.0.1", 9464) is None
    assert exposure_warning("::1", 9464) is None and exposure_warning("localhost", 1) is None
    warning = exposure_warning("0.0.0.0", 9464)
    assert warning is not None and "no authentication" in warning
    assert host_problem("10.0.0.5") is None
    why = host_problem("metrics.example.com")
    assert why is not None and "not an IP address" in why and "127.0.0.1" in why
    assert MetricsExport("::1", 9).url() == "http://[::1]:9/metrics"


def test_the_sample_dashboard_charts_only_metrics_soaktop_writes():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"\bsoaktop_[a-z0-9_]+", e)}
    written = set()
    for fam in _parse(_exposition(_snapshot())).values():
        written |= {s.name for s in fam.samples} | {fam.name}
    assert used and used <= written, used - written


def test_counters_are_left_out_until_the_load_has_figures_never_dropping_to_zero():
    """Between a matrix's cells the generator is new and its load not yet released: the
    snapshot's load view is empty. A counter written as 0 there, then its total again,
    would be read by Prometheus as a reset and its whole count added twice to rate()."""
    between = _snapshot(80).model_copy(deep=True)
    between.load = between.load.model_copy(
        update={"cumulative": None, "window": None, "completed": 0, "issued": 0, "failed": 0}
    )
    between.load.failures_by_class = {}
    fams = _parse(_exposition(between))
    counters = [f for f in fams.values() if f.type in ("counter", "summary")]
    assert not counters, [f.name for f in counters]
    assert fams["soaktop_in_flight_requests"].samples  # the gauges still say what is now
    assert fams["soaktop_run_info"].samples


def test_where_the_endpoint_listened_is_no_difference_between_two_runs(tmp_path):
    """Two runs that tested the same thing, scraped on different ports (or not at all):
    ``soaktop compare`` must not list the port as what differs between them."""
    import shutil

    from soak.after.compare import config_differences
    from soak.after.run_view import read_run

    views = []
    for i, (port, host) in enumerate(((9464, "127.0.0.1"), (None, "0.0.0.0"))):
        d = tmp_path / f"run{i}"
        shutil.copytree(Path(__file__).parents[1] / "report" / "fixtures" / "passed", d)
        rec = json.loads((d / "record.json").read_text())
        rec["config"] |= {"metrics_port": port, "metrics_host": host}
        (d / "record.json").write_text(json.dumps(rec))
        views.append(read_run(d))
    assert config_differences(views) == {}
