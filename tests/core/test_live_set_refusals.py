"""Live load changes that must be refused, and refused before anything changed (issue 16
§3): a trace replay's load (its times are the trace's), a paused load (a step begun in a
pause would measure the pause), and the same refusals in ``soaktop control``, the
monitor's keys and the config (stages or a sweep with a trace). Also: ``--redact``
learns a trace's and a mix's paths, relative ones included."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from loadgen.arrivals import RateCurve
from loadgen.client import StreamClient
from loadgen.open_loop import OpenLoopGenerator
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadGenerator, LoadPlan
from soak.cli.control import target_problem
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.record.redact import Redactor
from soak.record.snapshot import Snapshot
from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.load_steps import LoadSteps
from soak.run.redaction import run_redactor
from soak.run.state import RunState
from tui.load_control import next_target

SAMPLE_TRACE = Path(__file__).parents[2] / "samples" / "traces" / "soaktop_sample.jsonl"
BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "gates": [], "nvml": False}


def _state(tmp_path: Path, cfg: RunConfig) -> RunState:
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    return RunState(
        config=cfg,
        run_dir=tmp_path,
        run_id="t",
        origin_ns=origin,
        started_at="",
        endpoints=[],
        pool=None,
        clock={},
        redactor=Redactor([], False),
        events=events,
    )


def _plan(n: int) -> LoadPlan:
    return LoadPlan(("http://127.0.0.1:1",), n, 10.0, None, 1.0, 1.0, "t/load/chat")


def _parts() -> tuple[StreamClient, PromptPool, BodyBuilder]:
    pool = PromptPool((Prompt(0, "x"),), source="test")
    return StreamClient(max_connections=8), pool, BodyBuilder(model="m", max_tokens=1)


def _released(gen: LoadGenerator) -> LoadGenerator:
    gen.state.barrier_released_ns = time.perf_counter_ns()  # the issue window is open
    return gen


def test_a_trace_replay_refuses_a_rate_and_a_concurrency_and_records_no_step(
    tmp_path: Path,
) -> None:
    cfg = load_config({"arrival": f"trace:{SAMPLE_TRACE}"}, base=BASE, environ={})
    client, pool, bodies = _parts()
    gen = OpenLoopGenerator(_plan(4), client, pool, bodies, lambda r: None, iter([0.0]), 8)
    st = _state(tmp_path, cfg)
    steps = LoadSteps(st, _released(gen))
    for target in ({"rate": 30.0}, {"concurrency": 8}):
        why = steps.change(**target)
        assert why is not None and "trace replay" in why, why
    # Refused before anything changed: no "start: rate 0" step, nothing raised.
    assert st.steps == [] and gen.step is None


def test_a_paused_load_refuses_a_change_until_it_resumes(tmp_path: Path) -> None:
    cfg = load_config({"concurrency": 4}, base=BASE, environ={})
    client, pool, bodies = _parts()
    gen = _released(LoadGenerator(_plan(4), client, pool, bodies, lambda r: None))
    st = _state(tmp_path, cfg)
    steps = LoadSteps(st, gen)
    gen.pause()
    why = steps.change(concurrency=2)
    assert why is not None and "paused" in why
    assert st.steps == [] and gen.concurrency_target == 4
    gen.resume()
    assert steps.change(concurrency=2) is None
    assert [s.concurrency_start for s in st.steps] == [4, 2] and gen.concurrency_target == 2


def test_a_concurrency_the_client_cannot_serve_is_refused_not_raised(tmp_path: Path) -> None:
    cfg = load_config({"concurrency": 4}, base=BASE, environ={})
    client, pool, bodies = _parts()  # the client pools 8 connections
    gen = _released(LoadGenerator(_plan(4), client, pool, bodies, lambda r: None))
    st = _state(tmp_path, cfg)
    why = LoadSteps(st, gen).change(concurrency=9)
    assert why is not None and "9" in why
    assert st.steps == [] and gen.concurrency_target == 4  # nothing changed


def test_an_open_loop_rate_change_still_applies(tmp_path: Path) -> None:
    cfg = load_config({"arrival": "constant", "rate": 5.0}, base=BASE, environ={})
    client, pool, bodies = _parts()
    curve = RateCurve(points=[(0.0, 5.0)])
    gen = OpenLoopGenerator(
        _plan(4), client, pool, bodies, lambda r: None, iter([0.0]), 8, curve=curve
    )
    st = _state(tmp_path, cfg)
    assert LoadSteps(st, _released(gen)).change(rate=10.0) is None
    assert [s.rate_start for s in st.steps] == [5.0, 10.0] and gen.rate == 10.0


@pytest.mark.parametrize(
    "plan", [{"stages": "10s:5rps"}, {"stages": "10s:4"}, {"sweep": "rate=1,2"}]
)
def test_steps_with_a_trace_are_refused_naming_the_trace(plan: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(
            {"arrival": f"trace:{SAMPLE_TRACE}", "step_duration_s": 5.0, **plan}
            if "sweep" in plan
            else {"arrival": f"trace:{SAMPLE_TRACE}", **plan},
            base=BASE,
            environ={},
        )
    words = str(e.value)
    assert "trace replay" in words and "--rate" not in words, words  # no --rate was given


def test_soaktop_control_refuses_both_targets_for_a_trace() -> None:
    for rate, concurrency in ((30.0, None), (None, 8)):
        why = target_problem("trace", rate, concurrency)
        assert why is not None and "trace" in why and "use --rate" not in why, why


def test_the_monitor_keys_refuse_a_paused_load() -> None:
    snap = Snapshot.model_construct(phase="paused", seq=5, matrix=None, open_loop=None)
    asked = next_target(snap, None, 1)
    assert isinstance(asked, str) and "paused" in asked


def test_redact_learns_relative_trace_and_mix_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    shutil.copy(SAMPLE_TRACE, tmp_path / "traces" / "prod-east.jsonl")
    (tmp_path / "mixes").mkdir()
    (tmp_path / "mixes" / "team-chat.jsonl").write_text('{"prompt": "hello"}\n')
    (tmp_path / "mixes" / "team.toml").write_text(
        '[[class]]\nname = "chat"\nweight = 1\nprompts = "team-chat.jsonl"\n'
    )
    salt = b"\x01" * 32
    trace = load_config(
        {"arrival": "trace:traces/prod-east.jsonl", "redact": True}, base=BASE, environ={}
    )
    mix = load_config({"mix": "mixes/team.toml", "redact": True}, base=BASE, environ={})
    shown = run_redactor(trace, [], salt).text("replaying traces/prod-east.jsonl now")
    assert "prod-east" not in shown, shown
    shown = run_redactor(mix, [], salt).text("mix mixes/team.toml, class mixes/team-chat.jsonl")
    assert "team.toml" not in shown and "team-chat" not in shown, shown


def test_a_sweep_splits_a_duration_given_at_the_default_value() -> None:
    # --duration 60 is the field's default: it must still be the window split evenly,
    # not "a sweep needs ... duration_s" (the words asked for what was given).
    cfg = load_config({"sweep": "concurrency=2,4", "duration_s": 60.0}, base=BASE, environ={})
    assert (cfg.duration_s, cfg.step_duration_s) == (60.0, 30.0)
