"""Goodput and the knee (soak.judge.goodput): which requests meet an SLO, the per-step
figures sliced from a journal (soak.record.step_figures), and the knee's rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.judge.goodput import KNEE_RULE, knee, measured_steps, parse_slo, request_meets
from soak.record.models import LoadStep
from soak.record.step_figures import StepCounts
from soak.record.summary import LoadTiming


def _line(
    sent: float, step: int | None, ttft: float = 0.1, e2e: float = 0.5, **kw: Any
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "id": f"r/{sent}",
        "phase": "load",
        "worker": 0,
        "ok": True,
        "sent_s": sent,
        "end_s": sent + e2e,
        "ttft_s": ttft,
        "e2e_s": e2e,
        "output_tokens": 5,
        "prompt_tokens": 3,
        "chunks": 5,
        "itl_us": [100_000, 100_000],
        "cancelled": False,
    }
    if step is not None:
        line["step"] = step
    return line | kw


def test_a_good_request_completed_and_meets_every_objective() -> None:
    slos = parse_slo("ttft<200ms, tpot<=0.1s,itl<150ms")
    assert [s.text for s in slos] == ["ttft<0.2s", "tpot<=0.1s", "itl<0.15s"]
    assert request_meets(_line(0, 0), slos)  # tpot (0.5 − 0.1) / 4 = 0.1: on the bound
    assert not request_meets(_line(0, 0, ttft=0.3), slos)
    assert not request_meets(_line(0, 0, itl_us=[100_000, 200_000]), slos)
    assert not request_meets(_line(0, 0, ok=False), slos)
    assert not request_meets(_line(0, 0, e2e=0.6), slos)  # tpot 0.125
    assert request_meets(_line(0, 0, output_tokens=1, itl_us=[]), slos)  # no tpot, no gap
    assert request_meets(_line(0, 0, ttft=9.0), [])  # no SLO: every completed one


def test_the_knee_is_the_last_step_before_goodput_stops_rising() -> None:
    assert knee([5.0, 10.0, 19.0, 19.5, 12.0]) == 2  # 19.5 is not 5 % above 19
    assert knee([5.0, 10.0, 20.0]) is None  # still rising: the sweep did not reach it
    assert knee([5.0, 4.0]) == 0
    assert "5%" in KNEE_RULE


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(ln) + b"\n" for ln in lines))
    return path


def test_each_step_is_measured_over_its_span_after_its_settle(tmp_path: Path) -> None:
    lines = [_line(1.0 + i * 0.1, 0) for i in range(10)]  # step 0: 1.0 .. 1.9
    lines += [_line(3.0 + i * 0.1, 1, ttft=0.1 if i % 2 else 0.9) for i in range(10)]
    path = _write(tmp_path / "requests.jsonl", lines)
    steps = [
        LoadStep(index=0, origin="sweep", label="c=1", start_s=1.0, end_s=3.0, settle_s=0.5),
        LoadStep(index=1, origin="sweep", label="c=2", start_s=3.0, end_s=5.0, settle_s=0.5),
    ]
    whole = LoadTiming(
        requested_concurrency=2, workers_started=2, barrier_released=True,
        issue_start_s=1.0, issue_end_s=5.0, drain_end_s=6.0,
    )  # fmt: skip
    config = {"slo": "ttft<0.5s", "sweep": "concurrency=1,2"}
    done, sweep = measured_steps(path, steps, whole, config, [StepCounts(), StepCounts()])
    first, second = done
    assert first.load is not None and second.load is not None
    # Settle 0.5 s: the requests sent at 1.0 .. 1.4 are left out of step 0's figures.
    assert (first.load.completed, first.load.issued, first.load.issue_s) == (5, 5, 1.5)
    assert first.goodput == pytest.approx(5 / 1.5)
    assert second.load.completed == 5 and second.goodput == pytest.approx(3 / 1.5)  # i = 5, 7, 9
    assert second.load.requested_concurrency == 2 and second.load.drain_s == 0
    assert sweep is not None and sweep.knee_step == 0 and sweep.slo == ["ttft<0.5s"]


def test_lines_without_a_step_belong_to_step_0(tmp_path: Path) -> None:
    """A run without a plan stamps its requests only from the first live change on."""
    path = _write(tmp_path / "requests.jsonl", [_line(1.0, None), _line(2.5, 1)])
    steps = [
        LoadStep(index=0, origin="live", label="start", start_s=0.5, end_s=2.0),
        LoadStep(index=1, origin="live", label="live", start_s=2.0, end_s=3.0),
    ]
    whole = LoadTiming(requested_concurrency=1, workers_started=1, barrier_released=True)
    done, sweep = measured_steps(path, steps, whole, {}, [StepCounts(), StepCounts()])
    assert [s.load.completed for s in done if s.load] == [1, 1] and sweep is None
