"""Goodput and the knee (soak.judge.goodput): which requests meet an SLO, the per-step
figures sliced from a journal (soak.record.step_figures), and the knee's rule."""

from __future__ import annotations

import itertools
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


def test_the_knee_is_where_goodput_stops_rising_for_good() -> None:
    assert knee([5.0, 10.0, 19.0, 19.5, 12.0]) == 2  # 19.5 is not 5 % above 19
    assert knee([5.0, 10.0, 20.0]) is None  # still rising: the sweep did not reach it
    assert knee([5.0, 4.0]) == 0
    # one noisy dip is not the knee when goodput triples after it
    assert knee([5.0, 10.0, 9.8, 20.0, 30.0]) is None
    assert knee([5.0, 10.0, 9.8, 10.2, 10.1]) == 1
    assert knee([5.0, None, 10.0]) is None
    assert "5%" in KNEE_RULE and "for good" in KNEE_RULE


def test_open_loop_goodput_counts_from_the_intended_send() -> None:
    slos = parse_slo("ttft<1s,e2e<2s")
    on_time = {"ok": True, "sent_s": 10.0, "intended_s": 10.0, "ttft_s": 0.5, "e2e_s": 1.5}
    # the same answer, sent 0.8 s late: 1.3 s from when the user arrived
    late = {**on_time, "sent_s": 10.8}
    closed = {k: v for k, v in late.items() if k != "intended_s"}
    assert request_meets(on_time, slos) and request_meets(closed, slos)
    assert not request_meets(late, slos)


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


def _recovered_offered(tmp_path: Path, config: dict[str, Any], events: list[Any]) -> float | None:
    """``soaktop recover``'s offered rate of an open-loop window 2.0 .. 10.0 s."""
    from soak.after.journal_facts import RunJournals
    from soak.after.recover_open_loop import open_loop_timing

    _write(tmp_path / "requests.jsonl", [_line(2.0, None, intended_s=2.0)])
    whole = LoadTiming(
        requested_concurrency=1, workers_started=1, barrier_released=True,
        issue_start_s=2.0, issue_end_s=10.0, offered_rate=None,
    )  # fmt: skip
    journals = RunJournals(events=events, last_snapshot=None)
    timing, _ = open_loop_timing(tmp_path, config, journals, whole)
    assert timing is not None
    return timing.offered_rate


def test_recover_offers_a_sweeps_own_rates_not_its_highest(tmp_path: Path) -> None:
    """A rate sweep's ``config.rate`` is its highest step: recover drew the schedule at
    20 req/s throughout, and a recovered sweep of 5 and 20 req/s read as not achieved."""
    config = {
        "arrival": "constant", "rate": 20.0, "sweep": "rate=5,20", "step_duration_s": 4.0,
        "settle_s": 1.0, "duration_s": 8.0, "pool_seed": 0,
    }  # fmt: skip
    offered = _recovered_offered(tmp_path, config, [])
    assert offered == pytest.approx((5 * 4 + 20 * 4) / 8, abs=0.2)


def test_recover_offers_the_rate_a_live_change_set(tmp_path: Path) -> None:
    from soak.record.events import Event

    config = {"arrival": "constant", "rate": 10.0, "duration_s": 8.0, "pool_seed": 0}
    steps = [
        LoadStep(index=0, origin="live", label="start: rate 10 req/s", start_s=2.0),
        LoadStep(index=1, origin="live", label="live: rate 40", start_s=6.0, rate_start=40.0),
    ]
    events = [
        Event(t=s.start_s, wall="", kind="step", message=s.label,
              data={"step": s.model_dump(mode="json")})
        for s in steps
    ]  # fmt: skip
    offered = _recovered_offered(tmp_path, config, events)
    assert offered == pytest.approx((10 * 4 + 40 * 4) / 8, abs=0.2)


def test_recover_offers_each_step_its_own_rate_and_withholds_a_pause(tmp_path: Path) -> None:
    from soak.after.journal_facts import RunJournals
    from soak.after.recover_open_loop import open_loop_timing, step_offers
    from soak.record.models import PhaseSpan

    config = {
        "arrival": "constant", "rate": 20.0, "sweep": "rate=5,20", "step_duration_s": 4.0,
        "settle_s": 1.0, "duration_s": 8.0, "pool_seed": 0,
    }  # fmt: skip
    _write(tmp_path / "requests.jsonl", [_line(2.0, None, intended_s=2.0)])
    whole = LoadTiming(
        requested_concurrency=1, workers_started=1, barrier_released=True,
        issue_start_s=2.0, issue_end_s=10.0,
    )  # fmt: skip
    steps = [
        LoadStep(index=0, origin="sweep", label="rate=5", start_s=2.0, end_s=6.0, settle_s=1.0),
        LoadStep(index=1, origin="sweep", label="rate=20", start_s=6.0, end_s=10.0, settle_s=1.0),
    ]
    # the operator paused from 8.0 to 9.0 s, inside step 1: its 20 arrivals there withheld
    paused = [
        PhaseSpan(name="load", start_s=2.0, end_s=8.0),
        PhaseSpan(name="paused", start_s=8.0, end_s=9.0),
    ]
    journals = RunJournals(events=[], last_snapshot=None)
    timing, _ = open_loop_timing(tmp_path, config, journals, whole, paused)
    assert timing is not None
    assert timing.offered_rate == pytest.approx((5 * 4 + 20 * 3) / 8, abs=0.2)
    offers = step_offers(tmp_path, config, journals, timing, steps, paused)
    assert offers == [pytest.approx(5.0, abs=0.4), pytest.approx(20 * 2 / 3, abs=0.4)]


def test_a_step_is_measured_only_while_the_load_issued(tmp_path: Path) -> None:
    """A load stopped early at 4.0 s: its step 1 began (at 4.5 s) in the drain, and step
    0's span ends where issuing stopped, not where step 1 began (its rates per second of
    issuing)."""
    path = _write(tmp_path / "requests.jsonl", [_line(1.0 + i * 0.5, 0) for i in range(6)])
    steps = [
        LoadStep(index=0, origin="sweep", label="c=1", start_s=1.0, end_s=4.5),
        LoadStep(index=1, origin="sweep", label="c=2", start_s=4.5, end_s=4.0),
    ]
    whole = LoadTiming(
        requested_concurrency=2, workers_started=2, barrier_released=True,
        issue_start_s=1.0, issue_end_s=4.0, drain_end_s=6.0,
    )  # fmt: skip
    done, _ = measured_steps(path, steps, whole, {}, [StepCounts(), StepCounts()])
    first, second = (s.load for s in done)
    assert first is not None and second is not None
    assert (first.issue_s, first.completed, first.requests_per_s) == (3.0, 6, 2.0)
    assert (second.issue_s, second.completed, done[1].goodput) == (0.0, 0, None)


def test_verify_holds_the_records_steps_to_the_step_events(tmp_path: Path) -> None:
    """A step moved, relabelled or dropped in record.json alone (its figures recomputed
    to match) is a difference: the run announced its steps in events.jsonl."""
    from soak.after.verify import _check_step_spans

    steps = [
        LoadStep(index=0, origin="sweep", label="rate=5", start_s=1.0, rate_start=5.0),
        LoadStep(index=1, origin="sweep", label="rate=20", start_s=5.0, rate_start=20.0),
    ]
    events = [
        {"t": s.start_s, "wall": "", "kind": "step", "severity": "info", "message": s.label,
         "data": {"step": s.model_dump(mode="json")}}
        for s in steps
    ]  # fmt: skip
    _write(tmp_path / "events.jsonl", events)
    recorded = [
        steps[0].model_copy(update={"end_s": 5.0}),
        steps[1].model_copy(update={"end_s": 9.0}),
    ]
    problems: list[str] = []
    _check_step_spans(tmp_path, recorded, 9.0, problems)
    assert problems == []
    moved = [recorded[0].model_copy(update={"end_s": 6.0}), recorded[1]]
    _check_step_spans(tmp_path, moved, 9.0, problems)
    assert problems == ["steps (events.jsonl).steps[0].end_s: record 6.0, journal 5.0"]
    problems.clear()
    _check_step_spans(tmp_path, [], 9.0, problems)
    assert problems == ["steps: record has 0, events.jsonl announced 2"]


def test_a_constant_rate_on_the_step_boundaries_is_achieved_in_full(tmp_path: Path) -> None:
    """Constant 2 req/s, settle 0.5 s: every arrival lands on a boundary. The scheduler's
    times are whole nanoseconds (a hair before the float the offered count redraws), and
    a step that kept up read "achieved 1.6 of 2.0 req/s" — one arrival lost to the tie."""
    from types import SimpleNamespace

    from loadgen.arrivals import RateCurve, curve_offsets
    from soak.record.step_figures import judged_span
    from soak.run.load_steps import step_offered_rates

    # A release whose float sums round a hair past the journal's ns arithmetic at both
    # settle boundaries (0.5 s and 3.5 s): the ties CI met.
    released_ns, origin_ns = 3_879_396_074, 0
    released_s = (released_ns - origin_ns) / 1e9
    curve = RateCurve([(0.0, 2.0)])
    lines = []
    for offset in itertools.takewhile(lambda o: o < 6.0, curve_offsets("constant", curve)):
        intended_s = (released_ns + int(offset * 1e9) - origin_ns) / 1e9  # as the journal has it
        lines.append(_line(intended_s + 0.002, None, intended_s=intended_s))
    path = _write(tmp_path / "requests.jsonl", lines)
    steps = [
        LoadStep(index=i, origin="sweep", label=f"s{i}", settle_s=0.5,
                 start_s=released_s + 3.0 * i, end_s=released_s + 3.0 * (i + 1))
        for i in range(2)
    ]  # fmt: skip
    whole = LoadTiming(
        requested_concurrency=4, workers_started=4, barrier_released=True,
        issue_start_s=released_s, issue_end_s=released_s + 6.0, offered_rate=2.0,
    )  # fmt: skip
    cfg = SimpleNamespace(arrival="constant", arrival_seed=None, pool_seed=0, burstiness=None)
    spans = [judged_span(s, whole) for s in steps]
    offered = step_offered_rates(cfg, curve, released_s, spans)  # type: ignore[arg-type]
    assert offered == [pytest.approx(2.0), pytest.approx(2.0)]
    counts = [StepCounts(offered_rate=r) for r in offered]
    done, _ = measured_steps(path, steps, whole, {}, counts)
    for step in done:
        assert step.load is not None and step.load.achieved_rate == pytest.approx(2.0)
