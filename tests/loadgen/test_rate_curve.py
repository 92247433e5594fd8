"""A rate that follows a curve (stages, sweeps) and changes live (issue 16 §2-§4).

The curve's arithmetic and its schedules are checked as pure functions; the generator
follows the curve and ``set_rate`` against a loopback aiohttp server (tests/loadgen's
``serve``), every run bounded in time and count.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import numpy as np
import pytest

from loadgen.arrivals import RateCurve, arrival_offsets, curve_draws, curve_offsets
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.open_loop import OpenLoopGenerator
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from tests.loadgen.test_open_loop import _plan, serve

pytestmark = pytest.mark.timeout(60)


def _until(offsets: object, end_s: float) -> list[float]:
    return list(itertools.takewhile(lambda t: t < end_s, offsets))  # type: ignore[arg-type]


# -- the curve, pure ----------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "cv"), [("constant", None), ("poisson", None), ("gamma", 2.5)])
def test_a_constant_curve_gives_todays_schedule_float_for_float(model, cv):
    today = list(itertools.islice(arrival_offsets(model, 37.5, cv, 11), 10_000))
    curved = list(itertools.islice(curve_offsets(model, RateCurve([(0.0, 37.5)]), cv, 11), 10_000))
    assert curved == today


def test_a_ramp_gets_the_integral_of_its_rate_in_every_second():
    # 10 → 40 requests/s over 20 s: second k expects 10 + 0.75·(2k + 1) arrivals.
    curve = RateCurve([(0.0, 10.0), (20.0, 40.0)])
    expected = [curve.cumulative(k + 1) - curve.cumulative(k) for k in range(20)]
    assert expected[0] == pytest.approx(10.75) and expected[-1] == pytest.approx(39.25)
    for seed in range(5):
        offsets = np.asarray(_until(curve_offsets("poisson", curve, None, seed), 20.0))
        counts = np.histogram(offsets, bins=20, range=(0, 20))[0]
        # Poisson counts: each second within 4 standard deviations of its mean, and the
        # whole 500 within 4 of its own (a seeded draw: the bound is what "about" means).
        assert all(abs(n - m) < 4 * math.sqrt(m) for n, m in zip(counts, expected, strict=True))
        assert abs(counts.sum() - 500) < 4 * math.sqrt(500)
    # The constant model has no chance in it: its counts are the integral itself.
    constant = np.asarray(_until(curve_offsets("constant", curve), 20.0))
    counts = np.histogram(constant, bins=20, range=(0, 20))[0]
    assert all(abs(n - m) <= 1 for n, m in zip(counts, expected, strict=True)), counts


def test_a_stretch_at_rate_zero_sends_nothing_and_the_rate_after_it_resumes():
    # "1s:10rps, 1s:0rps, 1s:10rps" as steps: 10, 0, 10 arrivals, none while at 0.
    curve = RateCurve([(0, 10), (1, 10), (1, 0), (2, 0), (2, 10)])
    offsets = np.asarray(_until(curve_offsets("poisson", curve, None, 2), 30.0))
    assert not ((offsets >= 1) & (offsets < 2)).any()
    assert ((offsets >= 2) & (offsets < 3)).any()
    assert abs(len(offsets) - 290) < 4 * math.sqrt(290)
    constant = _until(curve_offsets("constant", curve), 3.0)
    assert [sum(1 for t in constant if k <= t < k + 1) for k in range(3)] in (
        [10, 0, 10],
        [11, 0, 9],
    )


def test_a_rate_that_stays_zero_ends_the_schedule():
    assert list(curve_offsets("poisson", RateCurve([(0, 5), (1, 5), (1, 0)]), None, 0))[-1] < 1
    assert list(curve_offsets("constant", RateCurve([(0.0, 0.0)]))) == []
    assert RateCurve([(0, 5), (2, 0)]).time_at(5.0) == math.inf


def test_time_at_inverts_cumulative_on_ramps_up_down_and_steps():
    curve = RateCurve([(0, 0), (4, 80), (6, 80), (6, 5), (9, 0), (9, 30)])
    for t in np.linspace(0.01, 15, 300):
        assert curve.time_at(curve.cumulative(float(t))) == pytest.approx(float(t), abs=1e-9)
    assert curve.cumulative(4) == pytest.approx(160) and curve.rate_at(6) == 5
    assert curve.rate_at(2) == pytest.approx(40) and curve.rate_at(100) == 30


def test_set_from_keeps_the_past_and_holds_the_new_rate():
    curve = RateCurve([(0.0, 10.0), (10.0, 40.0)])
    before = curve.cumulative(4.0)
    curve.set_from(4.0, 100.0)
    assert curve.cumulative(4.0) == pytest.approx(before)
    assert curve.rate_at(3.9) == pytest.approx(10 + 3 * 3.9) and curve.rate_at(4.0) == 100
    assert curve.rate_at(500.0) == 100  # the old 40 after 10 s is gone
    assert curve.cumulative(5.0) == pytest.approx(before + 100)
    curve.set_from(0.0, 3.0)  # before the window: the whole curve
    assert curve.points == [(0.0, 3.0)]


def test_a_live_change_leaves_every_arrival_before_it_as_it_was():
    constant = RateCurve([(0.0, 20.0)])
    changed = RateCurve([(0.0, 20.0)])
    changed.set_from(3.0, 80.0)
    a = _until(curve_offsets("poisson", constant, None, 5), 3.0)
    b = list(itertools.islice(curve_offsets("poisson", changed, None, 5), 5000))
    assert b[: len(a)] == a  # float for float
    after = [t for t in itertools.islice(b, len(a), len(a) + 2000) if t < 13.0]
    assert abs(len(after) - 800) < 4 * math.sqrt(800)  # 10 s at 80/s


def test_bad_curves_are_refused_in_words():
    with pytest.raises(ValueError, match="at least one"):
        RateCurve([])
    with pytest.raises(ValueError, match=r"point 1: time 1.0 s comes before .* 2.0 s"):
        RateCurve([(2.0, 1.0), (1.0, 1.0)])
    with pytest.raises(ValueError, match=r"point 0: rate -1.0 requests/s must be .* >= 0"):
        RateCurve([(0.0, -1.0)])
    with pytest.raises(ValueError, match=r"point 0: time nan s"):
        RateCurve([(math.nan, 1.0)])
    with pytest.raises(ValueError, match=r"set_from: rate inf"):
        RateCurve([(0.0, 1.0)]).set_from(1.0, math.inf)


# -- the generator follows the curve --------------------------------------------------------------


def _curve_generator(
    base: str,
    client: StreamClient,
    results: list[RequestResult],
    curve: RateCurve,
    duration_s: float,
    model: str = "constant",
) -> OpenLoopGenerator:
    pool = PromptPool((Prompt(0, "hi"),), source="test")
    bodies = BodyBuilder(model="m", max_tokens=4)
    draws = curve_draws(model, curve, None, 3)  # type: ignore[arg-type]
    plan = _plan(base, duration_s)
    return OpenLoopGenerator(plan, client, pool, bodies, results.append, draws, 64, curve=curve)


def _sent_offsets(gen: OpenLoopGenerator, results: list[RequestResult]) -> list[float]:
    released = gen.state.barrier_released_ns or 0
    return sorted(((r.intended_ns or 0) - released) / 1e9 for r in results)


async def test_the_generator_sends_the_curves_schedule():
    curve = RateCurve([(0.0, 10.0), (1.2, 70.0)])
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=64) as client:
        gen = _curve_generator(base, client, results, curve, 1.2, "poisson")
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 20)
    expected = _until(curve_offsets("poisson", RateCurve([(0.0, 10.0), (1.2, 70.0)]), None, 3), 1.2)
    assert len(results) == len(expected) and all(r.ok for r in results)
    assert _sent_offsets(gen, results) == pytest.approx(expected, abs=1e-8)


async def test_set_rate_re_times_the_arrival_waited_for_at_once():
    # 1 request/s: the second arrival is drawn for t = 1 s. At 0.3 s the rate goes to
    # 50/s; that arrival keeps its place (Λ = 1) and goes out at 0.3 + 0.7/50 s, not at 1 s.
    curve = RateCurve([(0.0, 1.0)])
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=64) as client:
        gen = _curve_generator(base, client, results, curve, 0.8)
        assert await gen.start_workers()
        assert gen.rate == 1.0
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.3)
        gen.set_rate(50.0)
        changed_s = gen.curve.points[-1][0] if gen.curve is not None else math.nan
        assert gen.rate == 50.0
        await asyncio.wait_for(run, 20)
    sent = _sent_offsets(gen, results)
    assert sent[0] == 0.0 and sent[1] == pytest.approx(changed_s + (1 - changed_s) / 50, abs=1e-6)
    assert sent[1] < 0.35
    late_ms = [(r.sent_ns - (r.intended_ns or 0)) / 1e6 for r in results]
    assert sorted(late_ms)[len(late_ms) // 2] < 10  # sent on its new time, not the old one
    # 50/s from the change to the window's end at 0.8 s: about 25 more.
    assert abs(len(sent) - 2 - (0.8 - changed_s) * 50) <= 2, sent


async def test_a_rate_of_zero_sends_nothing_until_the_rate_rises_again():
    curve = RateCurve([(0.0, 20.0)])
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=64) as client:
        gen = _curve_generator(base, client, results, curve, 1.2)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.3)
        gen.set_rate(0.0)
        await asyncio.sleep(0.4)
        assert gen.rate == 0.0 and not run.done()  # waiting, not finished
        gen.set_rate(20.0)
        await asyncio.wait_for(run, 20)
    assert gen.state.stop_reason == "issue window complete"
    sent = _sent_offsets(gen, results)
    assert all(not 0.32 < t < 0.69 for t in sent), sent
    assert 5 <= sum(1 for t in sent if t < 0.3) <= 7  # 20/s for 0.3 s
    assert 9 <= sum(1 for t in sent if t >= 0.7) <= 11  # 20/s again for 0.5 s


async def test_a_fixed_schedule_refuses_a_rate_change_in_words():
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=8) as client:
        pool = PromptPool((Prompt(0, "hi"),), source="test")
        gen = OpenLoopGenerator(
            _plan(base, 0.2), client, pool, BodyBuilder(model="m", max_tokens=4),
            results.append, iter([0.0, 0.1]), 8,
        )  # fmt: skip
        assert gen.rate is None
        with pytest.raises(ValueError, match="send times are fixed"):
            gen.set_rate(5.0)
