"""``soaktop report``: a self-contained HTML page, checked as text and in a real browser.

The browser test loads the page in headless Chromium with every host name made
unresolvable, then reads the DOM after the scripts ran (plotly's SVG per chart) and a
screenshot (a PNG that is not a single colour). Without Chromium it is skipped with the
reason; CI installs it (apt package ``chromium``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from soak.after.report import build_report, write_report
from soak.after.report.charts import CHARTS
from soak.after.report.series import thin
from soak.cli.reports import add_parsers

FIXTURES = Path(__file__).parent / "fixtures"
FAILED = FIXTURES / "post-load-500"
CHART_IDS = [c[0] for c in CHARTS]
EVIL = "<script>alert('pwned')</script>"


class _Refs(HTMLParser):
    """Every tag with its attributes (script bodies are not parsed as markup)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _figures(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="soak-figures">(.*?)</script>', page, re.S)
    assert m, "no figure data in the page"
    figures: dict[str, Any] = json.loads(m.group(1))
    return figures


def _evil_copy(tmp_path: Path) -> Path:
    """The failed fixture with markup in a fault detail, a reason and a fault event."""
    run = tmp_path / "evil"
    shutil.copytree(FAILED, run)
    rec = json.loads((run / "record.json").read_text())
    rec["faults"] = [
        {
            "time_s": 3.2,
            "t_s": 12.0,
            "source": "server log",
            "kind": "engine_dead",
            "severity": "critical",
            "detail": f"endpoint 1 log: {EVIL}",
            "replica": 1,
        }
    ]
    rec["reasons"][0]["message"] += " <img src=x onerror=alert(1)>"
    (run / "record.json").write_text(json.dumps(rec))
    event = {
        "t": 12.0,
        "wall": "2026-11-30T06:12:30.000+00:00",
        "kind": "fault",
        "severity": "critical",
        "message": f"endpoint 1 log: </script>{EVIL}",
        "data": {"fault": "engine_dead", "replica": 1},
    }
    with (run / "events.jsonl").open("a") as fh:
        fh.write(json.dumps(event) + "\n")
    return run


def test_page_is_offline_every_chart_has_data_and_the_tables_are_there():
    page = build_report(FAILED)
    refs = _Refs()
    refs.feed(page)
    external = [
        (tag, k, v)
        for tag, attrs in refs.tags
        for k, v in attrs.items()
        if k in ("src", "href", "data", "action", "srcset")
        and v
        and re.match(r"\s*(https?:)?//", v, re.I)
    ]
    assert external == []
    assert not [t for t, a in refs.tags if t == "link"]  # no stylesheet or preload links
    assert [a.get("src") for t, a in refs.tags if t == "script"] == [None, None, None]
    csp = [a.get("content") or "" for t, a in refs.tags if a.get("http-equiv")]
    assert csp and csp[0].startswith("default-src 'none';")  # the browser refuses requests
    figs = _figures(page)
    assert sorted(figs) == sorted(f"chart-{c}" for c in CHART_IDS)
    for fig in figs.values():
        assert any(y is not None for trace in fig["data"] for y in trace["y"])
        bands = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
        assert len(bands) >= 5  # identity, before gates, barrier, load, drain, ...
    names = {t["name"] for t in figs["chart-concurrency"]["data"]}
    assert {"client in flight", "endpoint 0 running", "endpoint 1 waiting"} <= names
    assert any(t.get("yaxis") == "y2" for t in figs["chart-throughput"]["data"])
    # The after-load HTTP 500 is marked on the timeline, with its words on hover.
    notes = figs["chart-throughput"]["layout"]["annotations"]
    assert any("json#2 (address)" in a.get("hovertext", "") for a in notes)
    assert figs["chart-throughput"]["layout"]["title"]["text"] == "Throughput per 10 s window"
    for section in ("Verdict", "Load", "Gates", "Thresholds", "Reconciliation", "Faults"):
        assert f"<h2>{section}</h2>" in page
    assert "Failed post-load JSON check" in page
    assert "json#2 (address)" in page  # the failed probe in the gates table


def test_markup_from_the_run_is_escaped(tmp_path):
    page = build_report(_evil_copy(tmp_path))
    assert EVIL not in page and "<script>alert(" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page  # faults table
    # Three script elements (data, plotly.js, drawing code) and nothing closes one early.
    assert page.count("</script>") == 3
    notes = _figures(page)["chart-kv"]["layout"]["annotations"]
    marker = [a for a in notes if "pwned" in a.get("hovertext", "")]
    assert marker and "&lt;/script&gt;&lt;script&gt;" in marker[0]["hovertext"]


def test_old_records_and_invalid_records_still_make_a_page(tmp_path):
    run = tmp_path / "old"
    shutil.copytree(FAILED, run)
    rec = json.loads((run / "record.json").read_text())
    del rec["faults"]  # records before faults[] existed
    rec["reconciliation"] = {  # and before per-counter reconciliation
        "matched": True,
        "load": {"client": {"requests": 5}, "matched": None, "unavailable": "/metrics failed"},
    }
    rec["telemetry"].pop("host", None)
    rec["unknown_future_field"] = 1
    (run / "record.json").write_text(json.dumps(rec))
    with (run / "events.jsonl").open("a") as fh:
        fh.write(
            json.dumps(
                {
                    "t": 10.0,
                    "wall": "x",
                    "kind": "fault",
                    "severity": "critical",
                    "message": "GPU 1: Xid 31",
                    "data": {"source": "dcgm", "fault": "xid", "gpu": 1, "xid": 31},
                }
            )
            + "\n"
        )
    page = build_report(run)
    assert "this record predates <code>faults</code>" in page
    assert "GPU 1: Xid 31" in page and "gpu (dcgm)" in page
    assert "/metrics failed" in page
    assert "field unknown_future_field is not in this soaktop&#x27;s record schema" in page


def test_a_run_without_a_record_or_journals(tmp_path):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.json").write_text("{}")
    page = build_report(run)
    assert "has no readable record" in page
    assert _figures(page) == {}
    assert page.count('class="nodata"') == len(CHARTS)


def test_thin_keeps_spikes_and_bounds_points():
    xs = [float(i) for i in range(10_000)]
    ys: list[float | None] = [1.0] * 10_000
    ys[4321] = 99.0
    ys[7000] = None
    ox, oy = thin(xs, ys, limit=500)
    assert len(ox) <= 500 and 99.0 in oy and ox == sorted(ox)


def test_cli_report_writes_the_page_and_refuses_non_run_dirs(tmp_path, capsys):
    ap = __import__("argparse").ArgumentParser(prog="soaktop")
    add_parsers(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(["report", str(tmp_path)])
    assert ns.handler(ns) == 2
    assert f"{tmp_path} is not a soaktop run directory" in capsys.readouterr().err
    out = tmp_path / "sub" / "r.html"
    ns = ap.parse_args(["report", str(FAILED), "--html", str(out)])
    assert ns.handler(ns) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {out}" in capsys.readouterr().out
    run = tmp_path / "copy"
    shutil.copytree(FAILED, run)
    assert write_report(run) == run / "report.html"


# --- the browser ---------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def rendered_charts(binary: str, profile: Path, url: str, n_charts: int) -> list[str]:
    """Load ``url`` in headless Chromium, check the page says all ``n_charts`` charts were
    drawn without error, and return each chart's part of the rendered DOM."""
    dom = _browser(binary, profile, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    html = dom.stdout.decode()
    body = re.search(r"<body[^>]*>", html)
    assert body is not None
    assert "data-charts-error" not in body.group(0), body.group(0)
    assert f'data-charts-rendered="{n_charts}"' in body.group(0), "the drawing did not finish"
    parts = re.split(r'<div class="chart[^"]*" id="chart-', html)[1:]
    assert len(parts) == n_charts
    return parts


def _browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        # No host name resolves: anything the page tried to fetch would fail.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=180, check=False)


def png_content_rows(png: bytes) -> tuple[int, int, int]:
    """(width, height, rows that prove the image is not a single colour).

    Decodes the PNG's scanlines (8-bit RGB/RGBA, not interlaced) without unfiltering: in
    a single-colour image every row after the first is either the first pixel repeated
    (filter None) or zero after its first pixel (Sub, Up, Average, Paeth). A row that is
    neither can only come from a change of colour."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(png):
        n = int.from_bytes(png[pos : pos + 4], "big")
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")
            depth, colour, interlace = data[8], data[9], data[12]
            assert depth == 8 and colour in (2, 6) and interlace == 0, "unexpected PNG format"
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * bpp + 1
    assert len(raw) == stride * height
    content = 0
    for r in range(1, height):
        row = raw[r * stride : (r + 1) * stride]
        row_filter, px = row[0], row[1:]  # a byte, where the chunk's kind above is 4 bytes
        uniform = px == px[:bpp] * width if row_filter == 0 else not any(px[bpp:])
        content += not uniform
    return width, height, content


def test_png_check_tells_a_single_colour_from_content():
    def png(rows: list[bytes], w: int) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            crc = zlib.crc32(kind + data).to_bytes(4, "big")
            return len(data).to_bytes(4, "big") + kind + data + crc

        ihdr = w.to_bytes(4, "big") + len(rows).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
        body = zlib.compress(b"".join(rows))
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body)

    flat = png([b"\x00" + b"\x10\x20\x30" * 4] * 3, 4)
    assert png_content_rows(flat) == (4, 3, 0)
    striped = png([b"\x00" + b"\x10\x20\x30" * 4, b"\x00" + b"\x10\x20\x30\xff\xff\xff" * 2], 4)
    assert png_content_rows(striped)[2] == 1


@pytest.mark.skipif(
    _chromium() is None,
    reason="headless Chromium not installed (apt-get install -y chromium); the browser "
    "test of soaktop report did not run",
)
def test_chromium_renders_every_chart_offline(tmp_path):
    binary = _chromium()
    assert binary is not None
    page = tmp_path / "report.html"
    page.write_text(build_report(FAILED), encoding="utf-8")
    n_charts = len(_figures(page.read_text()))
    url = page.as_uri()

    parts = rendered_charts(binary, tmp_path / "profile-dom", url, n_charts)
    assert len(parts) == len(CHART_IDS)
    for part in parts:
        name = part.split('"', 1)[0]
        assert 'class="main-svg"' in part, f"chart {name}: no SVG drawn"
        lines = re.findall(r'<path class="js-line"[^>]* d="M[^"]+', part)
        assert lines, f"chart {name}: no line drawn"

    shot = tmp_path / "shot.png"
    res = _browser(
        binary, tmp_path / "profile-png", "--window-size=1400,2400", f"--screenshot={shot}", url
    )
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    png = shot.read_bytes()
    assert len(png) > 10_000
    width, height, content = png_content_rows(png)
    assert (width, height) == (1400, 2400)
    assert content > height // 4, f"only {content} of {height} rows show anything"


@pytest.mark.e2e
def test_report_and_compare_on_a_fresh_demo_run(tmp_path):
    """The fixtures age; a run from today's soaktop must still compare and chart."""
    out = tmp_path / "runs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "soak",
            "demo",
            "--headless",
            "--duration",
            "4",
            "--scenario",
            "post-load-500",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    from soak.after.compare import compare, read_run

    view = read_run(run)
    assert view.problems == []
    rows = {r[0]: r[1:] for r in compare([read_run(FIXTURES / "passed"), view]).rows}
    assert rows["Whole-run verdict"] == ["Passed recorded checks", "Failed post-load JSON check"]
    assert rows["JSON before / after"][1] == "24/24 / 23/24"
    figs = _figures(build_report(run))
    assert sorted(figs) == sorted(f"chart-{c}" for c in CHART_IDS)
