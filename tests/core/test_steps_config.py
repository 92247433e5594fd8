"""--stages, --sweep, --settle, --step-duration and --slo: parsed, checked together, and
turned into the run's window, rate and concurrency (soak.run.config_steps)."""

from __future__ import annotations

from typing import Any

import pytest

from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.config_steps import PlannedStep, parse_stages, planned_steps
from soak.run.load_steps import ramp_changes

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "gates": []}


def _config(**cli: Any) -> RunConfig:
    return load_config(cli, base=BASE, environ={})


def _refused(**cli: Any) -> str:
    with pytest.raises(ConfigError) as e:
        _config(**cli)
    return str(e.value)


def test_open_loop_stages_set_the_window_and_the_peak_rate() -> None:
    cfg = _config(stages="2m:10rps,10m:40rps,2m:0rps", arrival="poisson")
    assert (cfg.duration_s, cfg.rate) == (840.0, 40.0)
    plan = planned_steps(cfg)
    assert [(p.offset_s, p.duration_s, p.start, p.end) for p in plan] == [
        (0.0, 120.0, 0.0, 10.0),  # the first stage ramps from 0, as k6's do
        (120.0, 600.0, 10.0, 40.0),
        (720.0, 120.0, 40.0, 0.0),
    ]
    assert plan[1].label == "stage 2: 10 → 40 req/s over 600 s"
    # config.json read back by the runner holds the derived values: they pass.
    again = RunConfig.model_validate(cfg.model_dump(mode="json", exclude={"think_time_s"}))
    assert (again.duration_s, again.rate) == (840.0, 40.0)


def test_closed_loop_stages_start_their_peak_workers() -> None:
    cfg = _config(stages="1m:16,5m:64")
    assert (cfg.duration_s, cfg.concurrency, cfg.arrival) == (360.0, 64, "closed")
    assert [p.kind for p in planned_steps(cfg)] == ["concurrency", "concurrency"]


@pytest.mark.parametrize(
    ("cli", "words"),
    [
        ({"stages": "1m:16,5m:64rps"}, "mix rates (rps, open loop) and concurrencies"),
        ({"stages": "2m:10rps"}, "add --arrival constant|poisson|gamma"),
        ({"stages": "1m:16", "arrival": "poisson", "rate": 5}, "closed loop"),
        ({"stages": "1m:16,5m:64", "duration_s": 30}, "the run lasts their sum, 360 s"),
        ({"stages": "1m:16,5m:64", "concurrency": 8}, "highest 64"),
        ({"stages": "2m:10rps", "arrival": "constant", "rate": 5}, "drop --rate"),
        ({"stages": "1m:1.5"}, "a concurrency is a whole number"),
        ({"stages": "1x:4"}, "stage 1: '1x' is not a duration"),
        ({"stages": "1m:0,2m:0"}, "every target is 0"),
        ({"stages": "1m:4", "sweep": "concurrency=1,2"}, "exclusive"),
        ({"sweep": "concurrency=4,8,4", "step_duration_s": 30}, "the values must rise"),
        ({"sweep": "load=4,8"}, "is not a sweep"),
        ({"sweep": "concurrency=4,8"}, "needs step_duration_s"),
        ({"sweep": "concurrency=4,8", "step_duration_s": 5}, "not shorter than a step"),
        ({"sweep": "concurrency=4,8", "step_duration_s": 30, "duration_s": 30}, "disagree"),
        ({"settle_s": 3.0}, "are for a sweep"),
        ({"slo": "ttft<2x"}, "slo item 'ttft<2x' is not an objective"),
        ({"slo": "queue<2s"}, "'queue' is not a per-request latency"),
        ({"slo": "ttft<2s,ttft<1s"}, "names ttft twice"),
    ],
)
def test_step_options_that_cannot_run_are_refused_in_words(cli: dict[str, Any], words: str) -> None:
    assert words in _refused(**cli)


def test_a_sweep_splits_a_given_duration_evenly_and_settles_10_s() -> None:
    cfg = _config(sweep="rate=5,10,20,40", arrival="constant", duration_s=240)
    assert (cfg.step_duration_s, cfg.settle_s, cfg.rate, cfg.duration_s) == (60, 10, 40, 240)
    plan = planned_steps(cfg)
    assert [(p.label, p.offset_s, p.start, p.end, p.settle_s) for p in plan] == [
        ("rate=5", 0, 5, 5, 10),
        ("rate=10", 60, 10, 10, 10),
        ("rate=20", 120, 20, 20, 10),
        ("rate=40", 180, 40, 40, 10),
    ]
    closed = _config(sweep="concurrency=4,8,16", step_duration_s=20, settle_s=2)
    assert (closed.concurrency, closed.duration_s) == (16, 60)


def test_stage_grammar_reads_units_and_zero_length_jumps() -> None:
    stages = parse_stages("0s:16, 90:16 ,1.5m:32,1h:0")
    assert [(s.duration_s, s.target) for s in stages] == [
        (0, 16),
        (90, 16),
        (90, 32),
        (3600, 0),
    ]


def _ramp(start: float, end: float, span: float) -> PlannedStep:
    return PlannedStep(0, "stage", "r", 0.0, span, "concurrency", start, end)


def test_a_closed_ramp_adds_each_worker_when_the_line_reaches_it() -> None:
    assert ramp_changes(_ramp(0, 4, 8)) == [(2.0, 1), (4.0, 2), (6.0, 3), (8.0, 4)]
    # Down: the line rounded down, one worker parked at each crossing.
    assert ramp_changes(_ramp(4, 2, 4)) == [(0.0, 3), (2.0, 2)]
    assert ramp_changes(_ramp(3, 3, 10)) == []


def test_a_zero_length_stage_is_a_jump_not_a_step() -> None:
    cfg = _config(stages="10s:10rps,0s:40rps,10s:40rps", arrival="constant")
    plan = planned_steps(cfg)
    # the jump gives no step of no time; the stage after it starts from its target
    assert [(p.index, p.offset_s, p.duration_s, p.start, p.end) for p in plan] == [
        (0, 0.0, 10.0, 0.0, 10.0),
        (1, 10.0, 10.0, 40.0, 40.0),
    ]
    assert plan[1].label == "stage 3: 40 → 40 req/s over 10 s"
