"""``--arrival trace:FILE`` and ``--time-scale``: the replay's options, checked with the
config (a bad trace never gets as far as a run directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.cli.parser import build_parser
from soak.run.config import ConfigError, RunConfig
from soak.run.config_arrival import trace_cap
from soak.run.config_load import load_config
from soak.run.trace_setup import offered_rate, replay_words, scaled_offsets

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "traces" / "soaktop_sample.jsonl"


def _load(**values: object) -> RunConfig:
    return load_config(dict(values), environ={}, base=BASE)


def test_a_trace_is_stored_as_arrival_trace_with_its_file_and_lasts_the_trace():
    cfg = _load(arrival=f"trace:{SAMPLE}", time_scale=2.0)
    assert (cfg.arrival, cfg.trace_file, cfg.time_scale) == ("trace", SAMPLE, 2.0)
    assert cfg.duration_s is None and cfg.max_requests is None  # not the 60 s default
    offsets = scaled_offsets(cfg)
    assert offsets[0] == 0.0 and offsets[-1] == pytest.approx(3.45 / 2)
    assert "30 arrivals over 1.73 s at time scale 2" in replay_words(cfg)
    again = RunConfig.model_validate(cfg.model_dump())  # how the runner receives it
    assert (again.arrival, again.trace_file, again.duration_s) == ("trace", SAMPLE, None)


def test_a_duration_or_a_request_count_shortens_the_replay_and_says_so():
    cfg = _load(arrival=f"trace:{SAMPLE}", duration_s=1.0, max_requests=10)
    assert cfg.duration_s == 1.0
    assert replay_words(cfg).endswith("shortened by --duration 1 s and --max-requests 10")


def test_the_cli_takes_the_trace_and_the_time_scale():
    args = build_parser().parse_args(
        ["run", "--endpoint", "http://h:1", "--model", "m", "--arrival", f"trace:{SAMPLE}",
         "--time-scale", "4"]
    )  # fmt: skip
    assert (args.arrival, args.time_scale) == (f"trace:{SAMPLE}", 4.0)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"arrival": "trace:/no/such.jsonl"}, r"trace file '/no/such.jsonl' does not exist"),
        ({"arrival": "trace"}, r"arrival = 'trace' needs a file: give --arrival trace:FILE"),
        ({"arrival": f"trace:{SAMPLE}", "rate": 5.0}, r"--rate 5.0 given with a trace replay"),
        (
            {"arrival": f"trace:{SAMPLE}", "synthetic_input_tokens": 64},
            r"--synthetic-input-tokens 64 given with a trace replay: the trace sets",
        ),
        ({"time_scale": 2.0}, r"time_scale = 2.0 is for a trace replay, not arrival = 'closed'"),
        (
            {"arrival": "poisson", "rate": 3.0, "trace_file": str(SAMPLE)},
            r"trace_file .* given with arrival = 'poisson': give --arrival trace:FILE",
        ),
        ({"arrival": f"trace:{SAMPLE}", "time_scale": 0.0}, r"time_scale"),
        (
            {"arrival": f"trace:{SAMPLE}", "matrix": "input=64 concurrency=1 reps=1 requests=1"},
            r"matrix",
        ),
    ],
)
def test_options_that_do_not_fit_a_replay_are_refused_in_words(values, words):
    with pytest.raises(ConfigError, match=words):
        _load(**values)


def test_a_bad_line_is_a_config_error_naming_the_file_and_line(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text(
        '{"t_s": 0, "input_tokens": 5, "output_tokens": 1}\n'
        '{"t_s": "soon", "input_tokens": 5, "output_tokens": 1}\n'
    )
    with pytest.raises(ConfigError, match=r"line 2: t_s = 'soon'; allowed: seconds"):
        _load(arrival=f"trace:{bad}")


def test_redact_hides_the_trace_path():
    cfg = _load(arrival=f"trace:{SAMPLE}", redact=True)
    assert cfg.public_dict()["trace_file"] == "<redacted>"


def test_offered_rate_counts_the_scaled_arrivals_in_the_window():
    cfg = _load(arrival=f"trace:{SAMPLE}", time_scale=2.0)
    offsets = scaled_offsets(cfg)
    assert offered_rate(cfg, 0.0, offsets[-1]) == pytest.approx(30 / offsets[-1])
    inside = sum(1 for t in offsets if 0.5 <= t <= 1.0)
    assert offered_rate(cfg, 0.5, 1.0) == pytest.approx(inside / 0.5)


def test_the_default_cap_follows_the_traces_busiest_minute():
    assert trace_cap([0.0, 1.0, 2.0]) == 64  # a slow trace: the floor
    burst = [i / 100 for i in range(3000)]  # 3,000 arrivals in 30 s: 100 req/s at peak
    assert trace_cap([*burst, 600.0]) == 10_000  # 4 × 50 req/s (per minute) × 60 s, capped
    assert trace_cap([i * 6.0 for i in range(100)]) == 64
