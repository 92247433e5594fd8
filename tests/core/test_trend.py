"""Robust trends: Theil–Sen with Sen's interval, Mann–Kendall (ties, autocorrelation)
and the change point, against known values and seeded noise."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from soak.judge.trend import (
    ALPHA,
    MAX_POINTS,
    autocorrelation_inflation,
    bounded,
    change_point,
    fit_trend,
    mann_kendall,
    pairwise_slopes,
    sen_interval,
    tie_corrected_variance,
)


def minutes(n: int) -> np.ndarray:
    """Window mid times of ``n`` one-minute windows, in seconds."""
    return (np.arange(n) + 0.5) * 60.0


def test_mann_kendall_matches_the_textbook_values():
    # [1..5]: S = 10, Var S = 5·4·15/18, z = (10 − 1)/√Var S, two-sided p = 0.0275.
    mk = mann_kendall(np.arange(1.0, 6.0))
    assert mk.s == 10
    assert mk.var_s == pytest.approx(5 * 4 * 15 / 18)
    assert mk.z == pytest.approx(9 / math.sqrt(5 * 4 * 15 / 18))
    assert mk.p == pytest.approx(0.0275, abs=5e-4)
    falling = mann_kendall(np.arange(5.0, 0.0, -1.0))
    assert falling.s == -10 and falling.z == pytest.approx(-mk.z)


def test_ties_lower_the_variance_and_a_constant_series_has_no_trend():
    # Two ties of size 2 and one of size 3 among 8 values.
    y = np.array([1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0])
    ties = 2 * (2 * 1 * 9) + 3 * 2 * 11
    assert tie_corrected_variance(y) == pytest.approx((8 * 7 * 21 - ties) / 18)
    flat = mann_kendall(np.zeros(20))
    assert (flat.s, flat.z, flat.p) == (0.0, 0.0, 1.0)
    # A failure rate that is 0 but for one window: no trend, and no division by zero.
    fit = fit_trend(minutes(20), np.r_[np.zeros(19), 0.01], min_points=8)
    assert fit.trend.direction == "flat" and fit.trend.mk_p is not None


def test_theil_sen_slope_is_exact_on_a_line_and_shrugs_off_wild_windows():
    t = minutes(30)
    y = 100.0 + 2.0 * (t / 3600.0)  # 2 per hour
    assert fit_trend(t, y, min_points=8).trend.slope_per_h == pytest.approx(2.0)
    wild = y.copy()
    wild[[3, 17, 25]] = [1e6, -1e6, 5e5]
    assert fit_trend(t, wild, min_points=8).trend.slope_per_h == pytest.approx(2.0, rel=0.05)


def test_sen_interval_covers_the_true_slope_about_95_percent_of_the_time():
    rng = np.random.default_rng(5)
    t = minutes(40)
    covered = 0
    for _ in range(300):
        y = 3.0 * t / 3600.0 + rng.normal(0.0, 1.0, len(t))
        slopes = np.sort(pairwise_slopes(t, y))
        lo, hi = sen_interval(slopes, mann_kendall(y).var_s)
        covered += lo <= 3.0 / 3600.0 <= hi
    assert 0.90 <= covered / 300 <= 0.99


def test_autocorrelation_inflation_is_one_for_noise_and_grows_for_a_wandering_series():
    rng = np.random.default_rng(2)
    assert autocorrelation_inflation(rng.normal(size=8)) >= 1.0
    # An alternating series is negatively autocorrelated: never deflated below 1.
    assert autocorrelation_inflation(np.tile([1.0, -1.0], 30)) == 1.0
    x = np.zeros(200)
    for k in range(1, 200):
        x[k] = 0.8 * x[k - 1] + rng.normal()
    assert autocorrelation_inflation(x) > 3.0


def test_noise_is_rarely_significant_and_a_wandering_gauge_not_much_more():
    rng = np.random.default_rng(11)
    t = minutes(60)
    iid = ar = 0
    for _ in range(400):
        iid += fit_trend(t, rng.lognormal(0.0, 0.2, 60), min_points=8).trend.direction != "flat"
        x = np.zeros(60)
        for k in range(1, 60):
            x[k] = 0.5 * x[k - 1] + rng.normal(0.0, 0.1)
        ar += fit_trend(t, np.exp(x), min_points=8).trend.direction != "flat"
    assert iid / 400 <= 3 * ALPHA
    # Without the correction an AR(1) gauge at φ = 0.5 is "significant" far more often.
    assert ar / 400 <= 0.02


def test_direction_needs_the_test_and_the_interval_and_enough_points():
    t = minutes(12)
    assert fit_trend(t, 10.0 + t / 60.0, min_points=8).trend.direction == "rising"
    assert fit_trend(t, 10.0 - t / 60.0, min_points=8).trend.direction == "falling"
    short = fit_trend(t[:5], 10.0 + t[:5], min_points=8).trend
    assert short.direction == "unknown" and short.n == 5 and short.slope_per_h is None


def test_change_point_finds_a_step_and_a_hinge_to_the_window():
    t = minutes(60)
    step = np.where(np.arange(60) < 25, 10.0, 7.0)
    cp = change_point(t, step)
    assert cp is not None and cp.shape == "step" and cp.index == 25
    assert cp.onset == pytest.approx(25 * 60.0)  # the boundary between windows 24 and 25
    hinge = 10.0 + np.maximum(0.0, t - t[30]) / 600.0
    cp = change_point(t, hinge)
    assert cp is not None and cp.shape == "hinge" and cp.index == 30
    line = change_point(t, 10.0 + t / 600.0)
    assert line is not None and line.index == 0  # monotone from the start
    assert change_point(t[:3], step[:3]) is None


def test_change_point_under_noise_lands_within_a_window():
    rng = np.random.default_rng(3)
    t = minutes(60)
    for _ in range(20):
        y = np.where(np.arange(60) < 40, 10.0, 8.0) * rng.lognormal(0.0, 0.05, 60)
        cp = change_point(t, y)
        assert cp is not None and abs(cp.index - 40) <= 1


def test_long_series_are_reduced_to_block_medians_and_stay_cheap():
    t = minutes(2000)
    y = np.arange(2000.0)
    bt, by = bounded(t, y)
    assert len(bt) == len(by) == MAX_POINTS
    # 2000 points in 300 blocks of 6 or 7: each block its mean time and median value.
    edges = np.linspace(0, 2000, MAX_POINTS + 1).astype(int)
    assert set(np.diff(edges)) == {6, 7}
    assert by[0] == pytest.approx(np.median(y[: edges[1]]))
    assert bt[-1] == pytest.approx(t[edges[-2] :].mean())
    assert bounded(t[:100], y[:100])[0] is not None and len(bounded(t[:100], y[:100])[0]) == 100
    start = time.perf_counter()
    fit = fit_trend(t, y + np.random.default_rng(0).normal(0.0, 50.0, 2000), min_points=8)
    elapsed = time.perf_counter() - start
    assert fit.trend.n == 2000 and fit.trend.direction == "rising"
    assert fit.trend.slope_per_h == pytest.approx(60.0, rel=0.05)  # one per minute
    assert elapsed < 2.0  # a few ms on an idle core; generous for a loaded CI box
