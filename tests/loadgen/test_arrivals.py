"""The arrival schedules: each model's mean gap and CV, seeded reproducibility."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from loadgen.arrivals import BLOCK, arrival_offsets

DRAWS = 20_000


def _gaps(model: str, rate: float, cv: float | None, seed: int) -> np.ndarray:
    offsets = list(itertools.islice(arrival_offsets(model, rate, cv, seed), DRAWS + 1))  # type: ignore[arg-type]
    return np.diff(np.asarray(offsets))


@pytest.mark.parametrize(
    ("model", "cv", "cv_tolerance"),
    # Seeded: the figures are fixed, the tolerances only say what "about" means. The CV of
    # 20,000 gamma gaps with CV 3 has a sampling error near 0.1 (heavy tail): 0.3 is wide.
    [("constant", None, 1e-9), ("poisson", None, 0.03), ("gamma", 3.0, 0.3), ("gamma", 1.0, 0.03)],
)
def test_mean_gap_is_one_over_rate_and_cv_is_the_models(model, cv, cv_tolerance):
    rate = 40.0
    gaps = _gaps(model, rate, cv, seed=7)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    expected_cv = {"constant": 0.0, "poisson": 1.0}.get(model, cv)
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, abs=cv_tolerance)
    assert (gaps >= 0).all()


def test_first_arrival_opens_the_window_and_blocks_join_without_a_seam():
    offsets = list(itertools.islice(arrival_offsets("constant", 10.0), BLOCK * 2 + 2))
    assert offsets[0] == 0.0
    gaps = np.diff(offsets)
    assert gaps == pytest.approx(np.full(len(gaps), 0.1))  # across the block boundary too


def test_a_seed_reproduces_its_schedule_and_another_seed_does_not():
    def first(seed: int) -> list[float]:
        return list(itertools.islice(arrival_offsets("poisson", 20.0, None, seed), 5000))

    assert first(3) == first(3)
    assert first(3) != first(4)


def test_bad_inputs_are_refused_in_words():
    with pytest.raises(ValueError, match="rate must be above 0"):
        next(arrival_offsets("poisson", 0.0))
    with pytest.raises(ValueError, match="needs a burstiness"):
        next(arrival_offsets("gamma", 5.0, None))
    with pytest.raises(ValueError, match="rate must be above 0 requests/s and finite, not inf"):
        next(arrival_offsets("constant", float("inf")))
    for cv in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="burstiness must be a finite number above 0"):
            next(arrival_offsets("gamma", 5.0, cv))
