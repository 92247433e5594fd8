"""The matrix profile's specification and its pooled, labelled figures."""

import pytest

from soak.judge.matrix import matrix_reasons
from soak.record.matrix import (
    CellResult,
    MatrixError,
    MatrixSummary,
    RepResult,
    parse_matrix,
    pool_cell,
)
from soak.run.config import ConfigError
from soak.run.config_load import load_config


def test_the_spec_reads_like_the_command_line_and_orders_cells_input_major():
    spec = parse_matrix("input=6000,25000 concurrency=1,4 reps=3 requests=4")
    assert spec.cells() == [(6000, 1), (6000, 4), (25000, 1), (25000, 4)]
    assert (spec.reps, spec.requests, spec.warmup) == (3, 4, 1)
    assert parse_matrix(spec.text()) == spec


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("concurrency=1,4", "has no input=N"),
        ("input=6000 concurrency=1 reps=0", "reps='0' must be ≥ 1"),
        ("input=6k concurrency=1", "input='6k' must be whole numbers"),
        ("input=6000 concurrency=1 seeds=3", "'seeds=3' is not KEY=VALUE"),
        ("input=6000 concurrency=1 reps=2,3", "reps='2,3' takes one number"),
    ],
)
def test_a_bad_spec_names_the_key_and_the_value(text, words):
    with pytest.raises(MatrixError) as e:
        parse_matrix(text)
    assert words in str(e.value)


def test_the_config_refuses_a_bad_matrix_and_a_prompt_source_beside_it():
    base = {"endpoints": ["http://127.0.0.1:8000"], "model": "m"}
    with pytest.raises(ConfigError) as e:
        load_config({"matrix": "input=6000"}, environ={}, base=base)
    assert "matrix = 'input=6000'" in str(e.value) and "has no concurrency" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(
            {"matrix": "input=64 concurrency=1", "synthetic_input_tokens": 64},
            environ={},
            base=base,
        )
    assert "matrix builds its own synthetic prompts" in str(e.value)


def _rep(rep: int, e2e: list[float], out: int = 100, failed: int = 0) -> RepResult:
    return RepResult(
        rep=rep,
        completed=len(e2e),
        failed=failed,
        failures_by_class={"http_5xx": failed} if failed else {},
        e2e_s=e2e,
        ttft_content_s=[0.5] * len(e2e),
        ttft_first_output_s=[0.2] * len(e2e),
        input_tokens=[6065] * len(e2e),
        output_tokens=[out] * len(e2e),
        max_running=4.0,
        min_free_mib=1000.0 - rep,
    )


def test_repetitions_pool_into_an_ordinary_median_and_a_nearest_rank_p50():
    cell = CellResult(
        index=0,
        input_tokens_target=6000,
        concurrency=4,
        prompt_pool_sha256="x",
        reps=[_rep(1, [4.0, 1.0]), _rep(2, [3.0, 2.0])],
    )
    pooled = pool_cell(cell)
    # four values 1, 2, 3, 4: the median is the mean of the middle two, the nearest-rank
    # p50 the second value — seed 004 keeps both, labelled
    assert pooled.e2e_median_s == 2.5 and pooled.e2e_p50_nearest_s == 2.0
    assert pooled.completed == 4 and pooled.input_tokens_mean == 6065
    assert pooled.ttft_content_median_s == 0.5 and pooled.ttft_first_output_median_s == 0.2
    assert pooled.max_running == 4.0 and pooled.min_free_mib == 998.0
    assert pooled.label == "~6000 / C4"


def test_matrix_reasons_fail_on_failures_and_note_a_clean_matrix():
    spec = parse_matrix("input=6000 concurrency=1,4 reps=2 requests=2")
    reps = [_rep(1, [1.0, 2.0]), _rep(2, [1.0, 2.0])]
    cells = [
        pool_cell(
            CellResult(
                index=i, input_tokens_target=6000, concurrency=c, prompt_pool_sha256="x", reps=reps
            )
        )
        for i, c in enumerate((1, 4))
    ]
    clean = MatrixSummary(spec=spec, max_tokens=64, cells=cells)
    (note,) = matrix_reasons(clean, max_failures=0, aborted=False)
    assert note.effect == "note"
    assert note.message == "matrix: 0 failures in 8 timed requests (2 cells × 2 reps × 2 requests)"
    broken = cells[1].model_copy(update={"reps": [_rep(1, [1.0], failed=1), _rep(2, [1.0, 2.0])]})
    bad = MatrixSummary(
        spec=spec, max_tokens=64, cells=[cells[0], pool_cell(broken)], not_run=["~25000 / C1"]
    )
    reasons = {r.code: r for r in matrix_reasons(bad, max_failures=0, aborted=False)}
    assert reasons["matrix_failures"].effect == "failed"
    assert reasons["matrix_failures"].message == (
        "matrix: 1 of 8 timed requests failed (1 http_5xx; by cell: ~6000 / C4 1)"
    )
    assert reasons["matrix_cut_short"].effect == "invalid"
    assert matrix_reasons(bad, max_failures=0, aborted=True)[-1].effect == "note"


def test_a_batch_whose_workers_never_started_makes_the_matrix_invalid():
    spec = parse_matrix("input=6000 concurrency=4 reps=1 requests=4")
    summary = MatrixSummary(
        spec=spec,
        max_tokens=64,
        barrier_failures=["cell 0 rep 1: 0 of 4 workers started (4× ConnectError: refused)"],
    )
    (reason,) = matrix_reasons(summary, max_failures=0, aborted=False)
    assert (reason.code, reason.effect) == ("matrix_barrier_not_reached", "invalid")
    assert "cell 0 rep 1: 0 of 4 workers started" in reason.message
