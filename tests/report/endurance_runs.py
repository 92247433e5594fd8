"""Run directories whose records carry a window series and an endurance judgement (schema
1.2), built through the models from the ``post-load-500`` fixture's record.

``decaying``: 30 whole windows of 60 s (then a partial one and a drain window) in which
throughput falls 4,210 → 2,905 tok/s (−31 %), TTFT p99 climbs 0.4 → 2.08 s (+420 %) from
load+00:20:00 and server RSS leaks +212 MB/h. ``stable``: the same series judged with no
drift or leak. ``short``: 4 windows, too few for a trend.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

from soak.record.endurance import (
    DriftFinding,
    Endurance,
    LeakFinding,
    Trend,
    WarmupInfo,
    WindowFigures,
    WindowGpu,
)
from soak.record.models import RunRecord

FIXTURES = Path(__file__).parent / "fixtures"
FAILED = FIXTURES / "post-load-500"

RELEASE_S = 6.462766181
"""The fixture's barrier release (``load.issue_start_s``): "since" is measured from it."""
SERIES_START = 65.0
"""The series origin, after a (nominal) 60 s warm-up, on the run's clock."""
WINDOW_S = 60
ONSET_S = RELEASE_S + 1200
"""TTFT p99 starts its climb here: load+00:20:00."""
POLICY = ["drift.output_tok_s>-10%", "drift.ttft.p99<+50%", "leak.server_rss<200MB/h"]


def windows(n: int = 30, *, decay: bool = True) -> list[WindowFigures]:
    """``n`` whole load windows, then a partial one and a drain window."""
    out = []
    for i in range(n + 2):
        start = SERIES_START + i * WINDOW_S
        frac = i / max(n - 1, 1) if decay else 0.0
        kind: Literal["load", "partial", "drain"] = (
            "load" if i < n else "partial" if i == n else "drain"
        )
        out.append(
            WindowFigures(
                i=i,
                start_s=start,
                end_s=start + (WINDOW_S if kind != "partial" else 20),
                kind=kind,
                completed=600,
                failed=1,
                output_tokens=252_600,
                output_tok_s=round(4210.0 - 1305.0 * frac, 1),
                req_s=10.0,
                ttft_p50=0.2,
                ttft_p99=_ttft_p99(start, n),
                e2e_p50=3.0,
                e2e_p99=10.8,
                error_rate=1 / 601,
                output_len=421.0,
                engine_kv_usage=0.4 + 0.001 * i,
                server_rss_mb=1000.0 + 3.5 * i,
                client_rss_mb=180.0,
                gpus=[WindowGpu(gpu="0", memory_used_mib=70_000.0, util_percent=97.0)],
                gpu_memory_used_mib=70_000.0,
                gpu_util_percent=97.0,
            )
        )
    return out


def _ttft_p99(start: float, n: int) -> float:
    """0.4 s until the onset, then a straight climb to 2.08 s at the last whole window."""
    last = SERIES_START + (n - 1) * WINDOW_S
    frac = min(1.0, max(0.0, (start - ONSET_S) / (last - ONSET_S)))
    return round(0.4 + 1.68 * frac, 3)


def _drift(figure: str, unit: str, base: float, end: float, **kw: Any) -> DriftFinding:
    return DriftFinding(
        figure=figure, unit=unit, baseline=base, end=end, change=(end - base) / base, **kw
    )


def decaying() -> Endurance:
    """Throughput and TTFT p99 in drift, server RSS leaking."""
    return Endurance(
        window_s=WINDOW_S,
        series_start_s=SERIES_START,
        warmup=WarmupInfo(spec="60s", end_s=SERIES_START, requests=412),
        windows=32,
        judged_windows=30,
        baseline=[0, 4],
        end=[25, 29],
        judged=True,
        policy=POLICY,
        policy_source="default",
        drift=[
            _drift(
                "output_tok_s",
                "tok/s",
                4210.0,
                2905.0,
                trend=Trend(
                    n=30,
                    slope_per_h=-650.0,
                    slope_lo_per_h=-700.0,
                    slope_hi_per_h=-600.0,
                    mk_z=-7.1,
                    mk_p=1e-9,
                    direction="falling",
                ),
                since_s=65.0,
                state="drift",
                words="throughput −31% (first 5 min 4,210 tok/s → last 5 min 2,905), "
                "monotone since load+00:01:00",
            ),
            _drift(
                "ttft.p99",
                "s",
                0.4,
                2.08,
                trend=Trend(
                    n=30,
                    slope_per_h=3.4,
                    slope_lo_per_h=2.9,
                    slope_hi_per_h=3.9,
                    mk_p=2e-6,
                    direction="rising",
                ),
                since_s=ONSET_S,
                since_event="fault: engine restart",
                state="drift",
                words="TTFT p99 +420% (0.4 s → 2.08 s), monotone since load+00:20:00",
            ),
            _drift(
                "e2e.p99",
                "s",
                10.8,
                10.8,
                trend=Trend(
                    n=30,
                    slope_per_h=0.0,
                    slope_lo_per_h=-0.1,
                    slope_hi_per_h=0.1,
                    mk_p=0.41,
                    direction="flat",
                ),
                state="stable",
            ),
            DriftFinding(
                figure="error_rate",
                baseline=0.001,
                end=0.026,
                change=0.025,
                trend=Trend(n=30, slope_per_h=0.05, mk_p=0.2, direction="flat"),
                state="stable",
            ),
            DriftFinding(figure="client.open_files", state="no_data"),
        ],
        leaks=[
            LeakFinding(
                resource="server_rss",
                unit="MB/h",
                rate_per_h=212.0,
                rate_lo_per_h=180.0,
                rate_hi_per_h=240.0,
                mk_p=1e-8,
                first=1007.0,
                last=1094.5,
                peak=1101.5,
                returned=False,
                state="leak",
                words="server RSS +212 MB/h (1,007 MB → 1,095 MB), never came back",
            ),
            LeakFinding(
                resource="gpu_mem",
                unit="MiB/h",
                rate_per_h=0.0,
                mk_p=0.9,
                first=70_000.0,
                last=70_000.0,
                returned=True,
                state="stable",
            ),
            LeakFinding(resource="open_files", state="no_data"),
        ],
    )


def stable() -> Endurance:
    """Judged on the same windows, nothing drifts or leaks."""
    e = decaying()
    for f in e.drift:
        f.state = "stable" if f.state == "drift" else f.state
    for leak in e.leaks:
        leak.state = "stable" if leak.state == "leak" else leak.state
    return e


def short() -> Endurance:
    """4 windows: too few to judge."""
    return Endurance(
        window_s=WINDOW_S,
        series_start_s=SERIES_START,
        windows=5,
        judged_windows=4,
        judged=False,
        not_judged_why="4 windows of 60 s; a trend needs 6",
        drift=[DriftFinding(figure="output_tok_s", state="no_data")],
    )


def write_run(
    dst: Path,
    endurance: Endurance | None,
    series: list[WindowFigures] | None = None,
    **changes: Any,
) -> Path:
    """A copy of the ``post-load-500`` fixture whose record carries ``series`` (default:
    :func:`windows`) and ``endurance``, with ``changes`` to its top-level keys."""
    shutil.copytree(FAILED, dst)
    raw = json.loads((dst / "record.json").read_text())
    rec = RunRecord.model_validate(raw)
    rec.windows = windows() if series is None else series
    rec.endurance = endurance
    out = rec.model_dump(mode="json") | changes
    (dst / "record.json").write_text(json.dumps(out))
    return dst
