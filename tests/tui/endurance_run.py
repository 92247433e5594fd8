"""A two-hour soak's run directory, written through the runner's models, for the monitor.

Built from the ``healthy`` fixture's load-phase snapshot (its load, client, gates and
telemetry), with the soak's parts the runner adds in schema 1.2: a ``windows.jsonl`` of
120 one-minute windows (throughput falling 31 % after the first half hour, TTFT p99
climbing tenfold, server RSS growing) and, in each snapshot, the judgement so far
(:class:`~soak.record.endurance.EnduranceView`). Deterministic: nothing from the clock.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from soak.record.endurance import EnduranceView, FigureNow, LeakNow, WindowFigures
from soak.record.snapshot import Snapshot
from tests.tui.helpers import HEALTHY, snapshots

WINDOW_S = 60
WARMUP_S = 60.0
WINDOWS = 120
"""Load windows after the warm-up (two hours); a drain window follows them."""

WARMUP_AT = 0
"""Snapshot indices: still warming up,"""
TOO_FEW_AT = 1
"""four windows closed (too few for a trend),"""
JUDGED_AT = 2
"""the end of the load, judged: drift and leaks breached."""


def window(i: int, kind: str = "load") -> WindowFigures:
    """Window ``i``: flat for the first 30, then throughput falls and TTFT p99 climbs."""
    late = max(0, i - 30) / (WINDOWS - 31)
    wobble = (-1) ** i * 0.01  # a little noise, the same every run
    tok = 4210.0 * (1 - 0.31 * late) * (1 + wobble)
    start = WARMUP_S + i * WINDOW_S
    return WindowFigures.model_validate(
        {
            "schema_version": "1.2",
            "i": i,
            "start_s": start,
            "end_s": start + WINDOW_S,
            "kind": kind,
            "source": "live",
            "completed": int(tok / 90 * WINDOW_S),
            "output_tok_s": tok,
            "req_s": tok / 90,
            "ttft_p99": 0.4 + 3.6 * late,
            "e2e_p99": 3.0 + 0.9 * late,
            "server_rss_mb": 2000 + 1.5 * i,
            "client_rss_mb": 80 + 0.03 * i,
            "gpu_memory_used_mib": 21600 + 8.5 * i,
        }
    )


def _figure(name: str, base: float, now: float, state: str) -> FigureNow:
    return FigureNow.model_validate(
        {"figure": name, "baseline": base, "now": now, "change": now / base - 1, "state": state}
    )


def _leak(resource: str, rate: float | None, unit: str, state: str) -> LeakNow:
    return LeakNow.model_validate(
        {"resource": resource, "rate_per_h": rate, "unit": unit, "state": state}
    )


def judged_view() -> EnduranceView:
    """The judgement at the end of the load: throughput and TTFT p99 breached, server RSS
    and GPU memory leaking."""
    return EnduranceView(
        window_s=WINDOW_S,
        windows=WINDOWS,
        judged=True,
        figures=[
            _figure("output_tok_s", 4210.0, 2905.0, "breached"),
            _figure("req_s", 46.8, 32.3, "breached"),
            _figure("ttft.p99", 0.4, 4.0, "breached"),
            _figure("e2e.p99", 3.0, 3.9, "close"),
            _figure("itl.p99", 0.029, 0.0296, "ok"),
            _figure("tpot.p99", 0.023, 0.0231, "ok"),
        ],
        leaks=[
            _leak("server_rss", 90.0, "MB/h", "breached"),
            _leak("client_rss", 1.8, "MB/h", "ok"),
            _leak("kv_usage", 0.004, "/h", "ok"),
            _leak("gpu_mem", 510.0, "MiB/h", "close"),
        ],
        badge="breached",
        badge_words="throughput -31%, TTFT p99 +900%",
    )


def _views() -> list[EnduranceView]:
    return [
        EnduranceView(window_s=WINDOW_S, warmup_left_s=30.0),
        EnduranceView(
            window_s=WINDOW_S,
            windows=4,
            not_judged_why="too few windows: 4 of 10",
            figures=[_figure("output_tok_s", 4210.0, 4168.0, "no_data")],
        ),
        judged_view(),
    ]


def _snapshot(template: dict[str, Any], seq: int, t: float, view: EnduranceView) -> str:
    load = template["load"] | {"issue_elapsed_s": t, "issue_total_s": WARMUP_S + WINDOWS * 60}
    line = template | {"seq": seq, "t": t, "phase_elapsed_s": t, "load": load, "events": []}
    snap = Snapshot.model_validate(line | {"schema_version": "1.2", "endurance": view})
    return snap.model_dump_json() + "\n"


def write_run(run_dir: Path, windows: int = WINDOWS) -> Path:
    """The run directory: config, identity, three snapshots and ``windows`` windows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "identity.json"):
        shutil.copyfile(HEALTHY / name, run_dir / name)
    (run_dir / "events.jsonl").write_text("")
    template = snapshots(HEALTHY)[7] | {"phase": "load", "run_id": "soak-2h"}
    times = [30.0, WARMUP_S + 4 * WINDOW_S + 1, WARMUP_S + WINDOWS * WINDOW_S + 1]
    lines = [
        _snapshot(template, n, t, v) for n, (t, v) in enumerate(zip(times, _views(), strict=True))
    ]
    (run_dir / "snapshots.jsonl").write_text("".join(lines))
    write_windows(run_dir, range(windows))
    return run_dir


def window_line(i: int, kind: str = "load") -> str:
    """Window ``i`` as its ``windows.jsonl`` line."""
    return window(i, kind).model_dump_json() + "\n"


def write_windows(run_dir: Path, which: range, mode: str = "w") -> None:
    """Windows ``which`` into ``windows.jsonl`` (the last of a whole run: a drain one)."""
    with (run_dir / "windows.jsonl").open(mode) as fh:
        for i in which:
            fh.write(window_line(i))
        if which and which.stop == WINDOWS:
            fh.write(window_line(WINDOWS, "drain"))
