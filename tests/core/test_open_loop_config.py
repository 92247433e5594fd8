"""The open-loop options: refused in words when they do not fit together."""

from __future__ import annotations

import pytest

from soak.run.config import ConfigError, RunConfig
from soak.run.config_arrival import default_max_in_flight
from soak.run.config_load import load_config

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}


def _load(**values: object) -> RunConfig:
    return load_config(dict(values), environ={}, base=BASE)


def test_closed_loop_is_the_default_and_has_no_rate():
    cfg = _load()
    assert cfg.arrival == "closed" and cfg.rate is None and cfg.max_in_flight is None


def test_open_loop_options_are_kept_and_echoed():
    cfg = _load(arrival="gamma", rate=12.5, burstiness=3.0, max_in_flight=40, arrival_seed=9)
    data = cfg.public_dict()
    assert (data["arrival"], data["rate"], data["burstiness"]) == ("gamma", 12.5, 3.0)
    assert (data["max_in_flight"], data["arrival_seed"]) == (40, 9)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"rate": 10.0}, r"--rate 10.0 given with arrival = 'closed'.*--arrival constant"),
        ({"max_in_flight": 5}, r"--max-in-flight 5 given with arrival = 'closed'"),
        ({"arrival": "poisson"}, r"arrival = 'poisson' needs rate \(--rate R\).*100,000"),
        ({"arrival": "gamma", "rate": 5.0}, r"needs burstiness \(--burstiness CV\)"),
        (
            {"arrival": "poisson", "rate": 5.0, "burstiness": 2.0},
            r"burstiness = 2.0 is for arrival = 'gamma', not 'poisson'",
        ),
        ({"arrival": "constant", "rate": 0.0}, r"rate.*0"),
        ({"arrival": "constant", "rate": 200_000.0}, r"rate.*200000"),
        (
            {"arrival": "uniform", "rate": 5.0},
            r"arrival = 'uniform'.*'closed', 'constant', 'poisson', 'gamma' or 'trace'",
        ),
    ],
)
def test_options_that_do_not_fit_are_refused_naming_field_and_value(values, words):
    with pytest.raises(ConfigError, match=words):
        _load(**values)


def test_default_cap_is_littles_law_with_headroom_and_bounded():
    assert default_max_in_flight(0.01) == 64  # never below the warm connections
    assert default_max_in_flight(20.0) == 4800  # 4 × 20 req/s × 60 s
    assert default_max_in_flight(1000.0) == 10_000


def test_arrivals_inside_an_operators_pause_are_not_offered():
    from soak.run.steady_load import offered_rate

    cfg = _load(arrival="constant", rate=50)
    # 50 arrivals in the 1 s window; the pause from 0.3 s to 0.6 s withheld 15 of them
    assert offered_rate(cfg, 0.0, 0.0, 1.0) == pytest.approx(50.0)
    assert offered_rate(cfg, 0.0, 0.0, 1.0, paused=[(0.3, 0.6)]) == pytest.approx(35.0)
    # an open pause (the run stopped while paused) withholds everything after it
    assert offered_rate(cfg, 0.0, 0.0, 1.0, paused=[(0.5, float("inf"))]) == pytest.approx(25.0)
