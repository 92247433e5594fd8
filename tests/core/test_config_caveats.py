"""The record's caveats (``soak.judge.config_caveats``): which apply, with the run's own
numbers; the same list from the same parts; verify names a record that says otherwise;
the report lists them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from soak.after.report import build_report
from soak.after.verify import _check_caveats
from soak.judge.config_caveats import config_caveats
from soak.record.matrix import CellResult, MatrixSpec, MatrixSummary, RepResult
from soak.record.models import Identity, LoadSummary, RunRecord, load_record, write_record
from soak.record.sections import PromptPoolFacts, RecordCaveat
from soak.record.telemetry import EngineSummary, RecordTelemetry

PASSED = Path(__file__).parents[1] / "report" / "fixtures" / "passed"
CONFIG: dict[str, Any] = {"max_tokens": 256, "ignore_eos": False, "temperature": None}


def _load(**kw: Any) -> LoadSummary:
    base: dict[str, Any] = {
        "requested_concurrency": 128,
        "workers_started": 128,
        "barrier_released": True,
        "issued": 64_600,
        "completed": 64_507,
        "output_tokens": 15_359_840,
        "issue_start_s": 10.0,
        "issue_end_s": 7210.0,
        "issue_s": 7200.0,
        "drain_s": 11.57,
        "elapsed_s": 7211.57,
        "output_tokens_per_s": 2129.887,
        "output_tokens_per_s_issue_window": 2131.5,
    }
    return LoadSummary(**(base | kw))


def _identity(size: int = 256, source: str = "sharegpt:prompts.json") -> Identity:
    return Identity(
        model="m",
        model_served=True,
        engine="vllm",
        endpoints=[],
        config_sha256="0" * 64,
        soaktop_version="t",
        prompt_pool=PromptPoolFacts(source=source, size=size),
    )


def _engines(*peaks: tuple[float, float, float]) -> RecordTelemetry:
    return RecordTelemetry(
        engines=[
            EngineSummary(endpoint=i, running_max=r, running_mean=m, waiting_max=w)
            for i, (r, m, w) in enumerate(peaks)
        ]
    )


def _by_code(caveats: list[RecordCaveat]) -> dict[str, str]:
    return {c.code: c.message for c in caveats}


def test_a_soak_gets_each_caveat_that_applies_with_its_numbers() -> None:
    got = config_caveats(
        CONFIG, _load(), _identity(), _engines((32, 31.5, 64), (32, 30.0, 0)), None
    )
    codes = [c.code for c in got]
    assert codes == [
        "prompt_pool_cycled",
        "closed_loop",
        "drain_in_denominator",
        "one_run",
        "output_length_natural",
        "concurrency_not_occupancy",
        "temperature_server_default",
    ]
    words = _by_code(got)
    assert "256 distinct prompts (from a file)" in words["prompt_pool_cycled"]
    assert "64,600 requests sent each prompt about 252.3 times" in words["prompt_pool_cycled"]
    assert words["closed_loop"].startswith("128 closed-loop workers: each sends its next")
    assert "not an arrival distribution" in words["closed_loop"]
    drain = words["drain_in_denominator"]
    assert "output_tokens_per_s (2,129.887 tok/s) divides all 15,359,840 output tokens" in drain
    assert "7,211.57 s = issue 7,200.00 s + drain 11.57 s" in drain
    assert "output_tokens_per_s_issue_window (2,131.500 tok/s)" in drain
    assert "requests sent and finished inside the issue window" in drain
    assert "not randomized alternating trials" in words["one_run"]
    assert "capped at max_tokens=256" in words["output_length_natural"]
    assert "mean 238.1 output tokens per completed request" in words["output_length_natural"]
    occupancy = words["concurrency_not_occupancy"]
    assert occupancy.startswith("Client concurrency 128 and the engines' sampled occupancy")
    assert "endpoint 0 ran at most 32 requests (mean 31.5), waiting up to 64" in occupancy
    assert "endpoint 1 ran at most 32 requests (mean 30.0), waiting up to 0" in occupancy
    assert "waiting > 0: the engine queued" in occupancy


def test_only_the_caveats_that_apply() -> None:
    config = CONFIG | {"ignore_eos": True, "temperature": 0.0, "warmup": "90s"}
    # A pool larger than the requests sent was never cycled; no engine telemetry.
    got = _by_code(
        config_caveats(config, _load(issued=200), _identity(size=256), RecordTelemetry(), None)
    )
    assert "prompt_pool_cycled" not in got and "temperature_server_default" not in got
    assert "output_length_natural" not in got
    assert (
        "ignore_eos was sent, so every request asked for max_tokens=256"
        in (got["output_length_fixed"])
    )
    assert "no engine occupancy was sampled" in got["concurrency_not_occupancy"]
    assert "A warm-up (90s) ran before the judged window" in got["warmup_excluded"]
    # No drain timed: the denominators are the same, no caveat about them.
    assert "drain_in_denominator" not in _by_code(
        config_caveats(CONFIG, _load(drain_s=None), None, RecordTelemetry(), None)
    )
    synthetic = config_caveats(CONFIG, _load(), _identity(128, "synthetic:512"), _engines(), None)
    assert "128 distinct prompts (synthetic)" in _by_code(synthetic)["prompt_pool_cycled"]


def test_nothing_measured_means_no_caveats() -> None:
    unreleased = _load(barrier_released=False, issued=0, completed=0)
    assert config_caveats(CONFIG, None, None, RecordTelemetry(), None) == []
    assert config_caveats(CONFIG, unreleased, _identity(), RecordTelemetry(), None) == []
    spec = MatrixSpec(input_tokens=[64], concurrency=[1], reps=1, requests=1, warmup=0)
    empty = MatrixSummary(spec=spec, max_tokens=16)
    assert config_caveats(CONFIG, None, None, RecordTelemetry(), empty) == []


def _matrix() -> MatrixSummary:
    def cell(index: int, concurrency: int, running: float | None) -> CellResult:
        rep = RepResult(rep=1, completed=4, e2e_s=[1.0] * 4, output_tokens=[20, 30, 40, 50])
        return CellResult(
            index=index,
            input_tokens_target=6000,
            concurrency=concurrency,
            prompt_pool_sha256="x",
            reps=[rep],
            completed=4,
            max_running=running,
        )

    return MatrixSummary(
        spec=MatrixSpec(input_tokens=[6000], concurrency=[1, 4], reps=3, requests=4, warmup=1),
        max_tokens=4096,
        cells=[cell(0, 1, 1.0), cell(1, 4, None)],
    )


def test_a_matrix_is_a_scout_and_says_so() -> None:
    got = config_caveats(
        CONFIG | {"temperature": 0}, None, _identity(), RecordTelemetry(), _matrix()
    )
    codes = [c.code for c in got]
    assert codes == [
        "matrix_scout",
        "closed_loop",
        "one_run",
        "output_length_natural",
        "concurrency_not_occupancy",
        "warmup_excluded",
    ]
    words = _by_code(got)
    assert words["matrix_scout"].startswith(
        "A small natural-output scout: 2 cells × 3 repetitions × 4 timed requests (8 completed)"
    )
    assert (
        "not controlled speculative-speedup, p99 or endurance evidence" in (words["matrix_scout"])
    )
    assert "max_tokens=4,096" in words["output_length_natural"]
    assert "mean 35.0 output tokens" in words["output_length_natural"]
    assert (
        "~6000 / C1: at most 1 running; ~6000 / C4: not sampled"
        in (words["concurrency_not_occupancy"])
    )
    assert "1 untimed warm-up request per worker" in words["warmup_excluded"]


def test_the_same_parts_give_the_same_list() -> None:
    args = (CONFIG, _load(), _identity(), _engines((32, 31.5, 64)), None)
    assert config_caveats(*args) == config_caveats(*args)


def test_verify_names_a_record_whose_caveats_its_parts_do_not_imply() -> None:
    rec = load_record(PASSED)
    right = config_caveats(rec.config, rec.load, rec.identity, rec.telemetry, rec.matrix)
    agreed = rec.model_copy(update={"caveats": right})
    agreed.model_fields_set.add("caveats")
    problems: list[str] = []
    _check_caveats(agreed, rec.load, problems)
    assert problems == []
    wrong = [*right[:-1], RecordCaveat(code="one_run", message="edited")]
    edited = agreed.model_copy(update={"caveats": wrong})
    _check_caveats(edited, rec.load, problems)
    assert any("the record says 'one_run' (edited)" in p for p in problems), problems
    assert any("imply 'temperature_server_default'" in p for p in problems), problems
    # A record older than 1.3 has no caveats to compare.
    older: list[str] = []
    _check_caveats(RunRecord.model_validate(rec.model_dump()), rec.load, older)
    assert "caveats" not in rec.model_fields_set and older == []


def test_the_report_lists_the_caveats_under_the_verdict(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(PASSED, run)
    rec = load_record(run)
    caveats = config_caveats(rec.config, rec.load, rec.identity, rec.telemetry, rec.matrix)
    write_record(run, rec.model_copy(update={"caveats": caveats}))
    page = build_report(run, plotly_js="")
    assert page.index('id="verdict"') < page.index('id="caveats"') < page.index('id="charts"')
    assert "32 closed-loop workers: each sends its next request" in page
    assert "(closed_loop)" in page and 'href="#caveats"' in page
    # An older record says it has none written down.
    old = build_report(PASSED, plotly_js="")
    assert "this record predates <code>caveats</code>" in old


def test_natural_output_that_always_hit_the_cap_says_so() -> None:
    capped = _load(completed=100, output_tokens=100 * 256)
    words = _by_code(config_caveats(CONFIG, capped, None, RecordTelemetry(), None))
    assert (
        "every answer reached the cap (mean 256.0 output tokens" in (words["output_length_natural"])
    )


def test_the_server_default_temperature_blames_output_lengths_only_when_they_were_natural() -> None:
    natural = _by_code(config_caveats(CONFIG, _load(), _identity(), RecordTelemetry(), None))
    fixed = _by_code(
        config_caveats(CONFIG | {"ignore_eos": True}, _load(), _identity(), RecordTelemetry(), None)
    )
    assert natural["temperature_server_default"].endswith("output lengths followed from it.")
    assert "output lengths" not in fixed["temperature_server_default"]
