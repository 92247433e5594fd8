"""``soaktop decide``: the seed-004 rule over three matrix runs, as a user sees it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from soak.after.decide import decide
from soak.after.decide_model import CellDecision, Decision, NotComparable, fmt_change
from soak.after.decide_render import render
from soak.after.decide_rule import controls_disagree, is_material_win
from soak.cli.decide import add_parser, parse_gain
from soak.record.gpu_telemetry import GpuIdentity
from soak.record.matrix import CellResult, MatrixSpec, MatrixSummary, RepResult
from soak.record.models import EndpointIdentity, Identity, RunRecord, Status, write_record
from soak.record.recipe import Recipe
from soak.record.sections import Reconciliation
from soak.record.telemetry import RecordTelemetry

POOL = "a" * 64
# nearest-rank offsets around a median: 12 values whose 6th and 7th are the median itself
_SPREAD = (-0.06, -0.04, -0.03, -0.02, -0.01, 0.0, 0.0, 0.01, 0.02, 0.03, 0.05, 0.08)
# seed 004: native nominal 8K/32K targets produced ~6,066 and ~25,280 actual input tokens
ACTUAL = {8000: 6066, 32000: 25280}


def rep(
    n: int,
    e2e: list[float],
    *,
    inputs: int = 6066,
    outputs: int = 300,
    failed: int = 0,
    failures: dict[str, int] | None = None,
    matched: bool | None = True,
) -> RepResult:
    return RepResult(
        rep=n,
        completed=len(e2e),
        failed=failed,
        failures_by_class=failures or {},
        e2e_s=e2e,
        ttft_content_s=[0.2] * len(e2e),
        ttft_first_output_s=[0.1] * len(e2e),
        input_tokens=[inputs] * len(e2e),
        output_tokens=[outputs] * len(e2e),
        max_running=4.0,
        min_free_mib=2143.0,
        reconciliation={} if matched is None else {"matched": matched},
    )


def cell(
    target: int,
    conc: int,
    median: float | None = None,
    *,
    reps: list[RepResult] | None = None,
    pool: str = POOL,
    outputs: int = 300,
) -> CellResult:
    """A cell of 3 reps × 4 requests whose pooled ordinary median is exactly ``median``."""
    if reps is None:
        assert median is not None
        vals = [median * (1 + d) if d else median for d in _SPREAD]
        order = [0, 6, 11, 3, 1, 7, 10, 4, 2, 8, 5, 9]  # interleaved across the reps
        vals = [vals[i] for i in order]
        reps = [
            rep(i + 1, vals[4 * i : 4 * i + 4], inputs=ACTUAL.get(target, target), outputs=outputs)
            for i in range(3)
        ]
    return CellResult(
        index=0, input_tokens_target=target, concurrency=conc, prompt_pool_sha256=pool, reps=reps
    )


def record(
    run_id: str,
    cells: list[CellResult],
    *,
    model: str = "private-target",
    slots: list[int | None] | None = None,
    status: Status = Status.PASSED,
    gates: dict[str, Any] | None = None,
    spec_decode: dict[str, Any] | None = None,
    reconciliation: dict[str, Any] | None = None,
    max_tokens: int = 4096,
    matrix: bool = True,
    label: str | None = None,
    version: str | None = None,
    recipe: dict[str, str] | None = None,
    declared: dict[str, str] | None = None,
    gpus: list[str] | None = None,
) -> RunRecord:
    """One arm's record; ``version``/``recipe`` are what every endpoint stated,
    ``declared`` the operator's ``--recipe`` facts, ``gpus`` the GPU UUIDs."""
    summary = MatrixSummary(
        spec=MatrixSpec(
            input_tokens=sorted({c.input_tokens_target for c in cells}) or [1],
            concurrency=sorted({c.concurrency for c in cells}) or [1],
            reps=3,
            requests=4,
            warmup=1,
        ),
        max_tokens=max_tokens,
        reasoning="max",
        cells=cells,
    )
    eps = [
        EndpointIdentity(
            url=f"<endpoint {i}>",
            reachable=True,
            token_slots=s,
            version=version,
            recipe=recipe or {},
        )
        for i, s in enumerate(slots or [None])
    ]
    return RunRecord(
        run_id=run_id,
        status=status,
        exit_code=0 if status is Status.PASSED else 1,
        config={"label": label} if label else {},
        identity=Identity(
            model=model,
            model_served=True,
            engine="vllm",
            endpoints=eps,
            config_sha256="c" * 64,
            soaktop_version="0.1.0",
            recipe=Recipe(declared=declared or {}),
            gpus=[GpuIdentity(index=i, name="H200", uuid=u) for i, u in enumerate(gpus or [])],
        ),
        matrix=summary if matrix else None,
        gates=gates or {},
        telemetry=RecordTelemetry.model_validate(
            {"engines": [{"endpoint": 0, "spec_decode": spec_decode}]}
        ),
        reconciliation=Reconciliation.model_validate(reconciliation or {"matched": True}),
        started_at="2026-11-01T00:00:00Z",
        ended_at="2026-11-01T01:00:00Z",
    )


def trial(table: list[tuple[int, int, float, float, float]], **kw: Any) -> list[RunRecord]:
    """(target, concurrency, before, candidate, restored) rows → the three records."""
    return [
        record(role, [cell(t, c, row[i]) for t, c, *row in table], **kw.get(role, {}))
        for i, role in enumerate(("before", "candidate", "restored"))
    ]


# seed 004, "DFlash results" and "Cache-layout results" (median E2E seconds)
DFLASH = [
    (8000, 1, 1.934, 1.830, 1.952),
    (8000, 4, 5.061, 4.962, 5.807),
    (32000, 1, 4.104, 4.195, 4.204),
    (32000, 4, 11.893, 12.007, 12.085),
]
LAYOUT = [
    (8000, 1, 1.735, 1.819, 1.761),
    (8000, 4, 5.222, 4.958, 4.672),
    (32000, 1, 4.129, 4.107, 4.210),
    (32000, 4, 11.355, 12.404, 11.494),
]


def write_runs(tmp_path: Path, recs: list[RunRecord]) -> list[str]:
    args = []
    for role, rec in zip(("before", "candidate", "restored"), recs, strict=True):
        d = tmp_path / role
        d.mkdir()
        write_record(d, rec)
        args += [f"--{role}", str(d)]
    return args


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    ap = argparse.ArgumentParser(prog="soaktop")
    add_parser(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(["decide", *args])
    rc = ns.handler(ns)
    out, err = capsys.readouterr()
    return rc, out, err


def by_label(d: Decision, label: str) -> CellDecision:
    return next(c for c in d.cells if c.label == label)


# ---------------------------------------------------------------- pooling


def test_pooling_odd_count_uses_every_repetition_and_shows_both_medians():
    reps = [rep(1, [1.0, 2.0, 3.0]), rep(2, [4.0, 5.0])]  # 5 values: median 3, p50 3
    runs = [record(r, [cell(8000, 1, reps=reps)]) for r in ("before", "candidate", "restored")]
    d = decide(*runs)
    arm = d.cells[0].candidate
    assert (arm.e2e_median_s, arm.e2e_p50_nearest_s, arm.requests, arm.reps) == (3.0, 3.0, 5, 2)


def test_pooling_even_count_median_is_the_mean_of_the_middle_two_p50_is_observed():
    reps = [rep(1, [1.0, 2.0]), rep(2, [3.0, 10.0])]  # median (2+3)/2, nearest-rank p50 = 2
    runs = [record(r, [cell(8000, 1, reps=reps)]) for r in ("before", "candidate", "restored")]
    d = decide(*runs)
    arm = d.cells[0].before
    assert arm.e2e_median_s == 2.5 and arm.e2e_p50_nearest_s == 2.0
    text = render(d)
    assert "Nearest-rank p50 seconds" in text and "2.500" in text and "2.000" in text
    assert "Ordinary median of every repetition's timed requests, pooled" in text


def test_pooled_median_is_recomputed_and_a_stale_stored_one_is_a_caveat():
    c = cell(8000, 1, 5.0).model_copy(update={"e2e_median_s": 9.0})
    runs = trial([(8000, 1, 5.0, 5.0, 5.0)])
    runs[0] = record("before", [c])
    d = decide(*runs)
    assert d.cells[0].before.e2e_median_s == 5.0
    assert [x.code for x in d.caveats] == ["stored_median_differs"]
    assert "stored 9.000 s, recomputed 5.000 s" in d.caveats[0].message


# ---------------------------------------------------------------- the rule


def test_exactly_ten_percent_lower_than_both_controls_is_a_win():
    assert is_material_win(5.0, 4.5, 0.10)
    assert is_material_win(1.735, 1.735 * 0.9, 0.10)  # float product, still the boundary
    d = decide(*trial([(8000, 4, 5.0, 4.5, 5.0)]))
    c = d.cells[0]
    assert c.win and c.verdict == "win" and c.gain_vs_before_pct == pytest.approx(10.0)
    assert d.decision == "promote" and d.wins == 1
    assert "10.00% faster than before and 10.00% faster than restored" in d.reasons[1]


def test_nine_point_nine_nine_percent_is_not_a_win():
    assert not is_material_win(5.0, 4.5005, 0.10)  # 9.99% lower
    d = decide(*trial([(8000, 4, 5.0, 4.5005, 5.0)]))
    c = d.cells[0]
    assert not c.win and c.verdict == "no win" and d.decision == "retain original"
    assert "9.99% faster than before, 9.99% faster than restored: not at least 10% faster" in (
        render(d)
    )


def test_controls_apart_by_exactly_the_gain_are_reliable_more_is_not():
    assert not controls_disagree(5.0, 4.5, 0.10)
    assert controls_disagree(5.0, 4.4995, 0.10)
    ok = decide(*trial([(8000, 4, 5.0, 4.0, 4.5)])).cells[0]
    assert ok.reliable and ok.verdict == "win"


def test_seed_004_dflash_6k_c4_improves_on_restored_only_and_is_not_a_win():
    d = decide(*trial(DFLASH))
    c = by_label(d, "~6K/C4")
    assert c.gain_vs_restored_pct == pytest.approx(14.55, abs=0.005)
    assert c.gain_vs_before_pct == pytest.approx(1.96, abs=0.005)
    assert not c.win and not c.beats_both
    # the two controls (5.061 vs 5.807) are 12.85% apart: the cell cannot resolve 10%,
    # so it is inconclusive (issue 15; it was "no win" beside a caveat before)
    assert c.verdict == "inconclusive" and not c.reliable
    assert c.inconclusive_reasons == ["controls_disagree"]
    assert c.controls_apart_pct == pytest.approx(12.85, abs=0.005)
    assert d.decision == "retain original" and (d.wins, d.cells_total) == (0, 4)
    text = render(d)
    assert "soaktop decide: retain original — 0/4 material wins" in text
    assert d.card == (
        "0/4 material wins (1 inconclusive) — at least 10% lower pooled median E2E required "
        "against both controls: retain the original"
    )
    assert d.card in text and d.inconclusive == 1
    assert "~6K/C4: inconclusive: the controls are 12.85% apart (more than 10%)" in text
    assert (
        "14.55% faster than restored but only 1.96% faster than before: "
        "not at least 10% faster than both" in text
    )
    row = next(line for line in text.splitlines() if line.split()[:2] == ["~6K", "4"])
    assert row.split()[2:5] == ["5.061", "4.962", "5.807"]
    assert "| Actual input | Concurrency | Original before | Candidate | Original restored |" in (
        render(d, markdown=True)
    )


def test_seed_004_cache_layout_trial_retains_with_its_slowdowns_in_words():
    d = decide(*trial(LAYOUT))
    assert d.decision == "retain original" and d.wins == 0
    c = by_label(d, "~25K/C4")
    # the seed says 9.25%/7.92% from unrounded medians; its rounded table gives 9.24%
    assert "9.24% slower than before, 7.92% slower than restored" in render(d)
    assert c.verdict == "no win"
    shaky = by_label(d, "~6K/C4")  # 5.222 vs 4.672: 10.53% apart
    assert shaky.verdict == "inconclusive" and not shaky.reliable


def test_promote_when_one_cell_wins_by_default_and_all_can_be_required():
    table = [(8000, 1, 2.0, 1.9, 2.0), (8000, 4, 5.0, 4.0, 5.1)]
    d = decide(*trial(table))
    assert d.decision == "promote" and (d.wins, d.min_wins) == (1, 1)
    assert d.reasons[0] == d.card
    assert d.card == (
        "1/2 material wins — at least 10% lower pooled median E2E required against both "
        "controls: promote the candidate"
    )
    assert "~6K/C4: 20.00% faster than before and 21.57% faster than restored" in d.reasons[2]
    assert d.reasons[2].endswith("— a material win") and d.reasons[1].endswith("— no win")
    strict = decide(*trial(table), min_wins=None)
    assert strict.decision == "retain original" and strict.min_wins == 2
    assert "Promote when every cell is a material win." in strict.rule
    assert strict.card == (
        "1/2 material wins — at least 10% lower pooled median E2E required against both "
        "controls, in every cell: retain the original"
    )


def test_a_candidate_beating_disagreeing_controls_is_inconclusive_not_a_win():
    """Issue 15: decide promoted on a cell it had itself marked unreliable. The candidate
    beats both controls by > 10%, but the controls are 16.67% apart: inconclusive."""
    d = decide(*trial([(8000, 4, 5.0, 3.5, 6.0)]))  # controls 16.67% apart
    c = d.cells[0]
    assert c.beats_both and not c.win and not c.reliable
    assert c.verdict == "inconclusive" and c.inconclusive_reasons == ["controls_disagree"]
    assert d.decision == "retain original" and (d.wins, d.inconclusive) == (0, 1)
    assert "the machine drifted by more than the gain asked for" in d.reasons[1]
    assert d.reasons[1].startswith("~6K/C4: inconclusive: the controls are 16.67% apart")
    assert "which does not count" in d.reasons[1]
    assert any(cv.code == "controls_disagree" for cv in d.caveats)


# ---------------------------------------------------------------- comparability


def test_different_cells_are_refused_naming_them(tmp_path, capsys):
    b, c, r = trial(DFLASH)
    c = record("candidate", [cell(8000, 1, 1.8), cell(8000, 4, 4.9), cell(8000, 8, 9.0)])
    assert c.matrix is not None
    c.matrix.not_run.append("~32000 / C1")
    rc, out, err = cli(write_runs(tmp_path, [b, c, r]), capsys)
    assert rc == 2 and out == ""
    assert "these runs cannot be compared" in err
    assert "before has ~32000 / C1 (not run there), ~32000 / C4 that candidate lacks" in err
    assert "candidate has ~8000 / C8 that before lacks" in err


def test_a_run_without_a_matrix_is_named(tmp_path, capsys):
    b, c, r = trial(DFLASH)
    c = record("soak-123", [], matrix=False)
    rc, _, err = cli(write_runs(tmp_path, [b, c, r]), capsys)
    assert rc == 2
    assert "the candidate run soak-123 has no matrix section" in err


def test_a_missing_record_is_a_usage_error(tmp_path, capsys):
    args = write_runs(tmp_path, trial(DFLASH))
    (tmp_path / "restored" / "record.json").unlink()
    rc, _, err = cli(args, capsys)
    assert rc == 2 and f"the restored run {tmp_path / 'restored'} has no record.json" in err


def test_prompt_pool_mismatch_is_refused_unless_allowed(tmp_path, capsys):
    b, c, r = trial([(8000, 1, 2.0, 1.9, 2.0)])
    c = record("candidate", [cell(8000, 1, 1.9, pool="b" * 64)])
    args = write_runs(tmp_path, [b, c, r])
    rc, _, err = cli(args, capsys)
    assert rc == 2
    assert "the prompt pools differ (~8000 / C1: before aaaaaaaaaaaa, candidate bbbbbbbbbbbb" in err
    assert "--allow-different-prompts" in err
    rc, out, _ = cli([*args, "--allow-different-prompts"], capsys)
    assert rc == 0 and "the arms sent different prompts" in out and "[different_prompts]" in out


def test_the_same_run_as_both_controls_is_refused():
    b, c, _ = trial(DFLASH)
    with pytest.raises(NotComparable, match="before and restored runs are the same run"):
        decide(b, c, b)


def test_min_wins_above_the_cells_is_a_usage_error(tmp_path, capsys):
    rc, _, err = cli([*write_runs(tmp_path, trial(DFLASH)), "--min-wins", "5"], capsys)
    assert rc == 2 and "min_wins 5 must be between 1 and the 4 cells" in err


def test_min_gain_takes_percent_and_refuses_an_ambiguous_fraction():
    assert parse_gain("10%") == pytest.approx(0.10) and parse_gain("7.5") == pytest.approx(0.075)
    with pytest.raises(argparse.ArgumentTypeError, match="ambiguous: write 10% for a fraction"):
        parse_gain("0.1")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_gain("100%")


def test_min_gain_changes_the_verdict(tmp_path, capsys):
    args = write_runs(tmp_path, trial([(8000, 4, 5.0, 4.6, 5.0)]))  # 8% faster than both
    rc, out, _ = cli([*args, "--min-gain", "5%", "--json"], capsys)
    assert rc == 0 and json.loads(out)["decision"] == "promote"
    rc, out, _ = cli(args, capsys)
    assert rc == 0 and "soaktop decide: retain original — 0/1 material wins" in out


# ---------------------------------------------------------------- caveats


def codes(d: Decision) -> list[str]:
    return [c.code for c in d.caveats]


def caveat(d: Decision, code: str) -> str:
    return next(c.message for c in d.caveats if c.code == code)


def test_a_clean_trial_has_only_the_controls_caveat_it_earns():
    d = decide(*trial(DFLASH))
    assert codes(d) == ["controls_disagree"]
    assert "~6K/C4 controls 12.85% apart" in caveat(d, "controls_disagree")


def test_few_samples():
    small = [rep(1, [1.0, 1.1])]
    runs = [record(r, [cell(8000, 1, reps=small)]) for r in ("before", "candidate", "restored")]
    d = decide(*runs)
    msg = caveat(d, "few_samples")
    assert "~6K/C1 before 2 requests in 1 repetitions" in msg and "fragile" in msg


def test_output_length_differs():
    b, _, r = trial([(32000, 4, 11.355, 12.404, 11.494)])
    c = record("candidate", [cell(32000, 4, 12.404, outputs=340)])
    msg = caveat(decide(b, c, r), "output_length_differs")
    assert "~25K/C4 mean output tokens 300 / 340 / 300 (before / candidate / restored), " in msg
    assert "13.3% apart" in msg and "different amounts of work" in msg


GATE_FAILURE = {
    "label": "j3",
    "outcome": "contract",
    "reason": "the answer is not the JSON the task asked for",
    "request_id": "probe-j3",
    "t_s": 3.0,
    "wall": "2026-11-01T00:00:03Z",
}
"""A gate failure as ``probes.gates.GateFailure`` writes one."""


def test_failed_gates_and_a_run_that_did_not_pass():
    gates = {
        "before": {"json": {"passed": 23, "total": 24, "failures": [GATE_FAILURE]}},
        "after": {"tools": {"passed": 6, "total": 6, "failures": []}},
    }
    runs = trial(DFLASH, candidate={"gates": gates, "status": Status.FAILED})
    d = decide(*runs)
    assert "contract gates failed: candidate before json 23/24" in caveat(d, "gates_failed")
    assert "after tools" not in caveat(d, "gates_failed")
    assert "not every run PASSED: candidate FAILED" in caveat(d, "run_not_passed")
    assert d.decision == "retain original"  # caveats never flip a decision by themselves


def test_request_failures_and_reconciliation_gaps():
    reps = [
        rep(1, [1.0, 1.1, 1.2], failed=1, failures={"http_5xx": 1}),
        rep(2, [1.0, 1.1, 1.2, 1.3], matched=False),
        rep(3, [1.0, 1.1, 1.2, 1.3]),
    ]
    b, _, r = trial([(8000, 1, 1.1, 1.1, 1.1)])
    c = record("candidate", [cell(8000, 1, reps=reps)])
    r = r.model_copy(update={"reconciliation": Reconciliation(matched=False)})
    d = decide(b, c, r)
    assert "candidate ~6K/C1 1/12 (1 http_5xx)" in caveat(d, "request_failures")
    gap = caveat(d, "reconciliation_gap")
    assert "candidate ~6K/C1 rep 2" in gap and "restored (the run's windows)" in gap


def test_model_difference_and_matrix_settings_are_caveats_not_refusals():
    runs = trial(DFLASH, candidate={"model": "other-model", "max_tokens": 2048})
    d = decide(*runs)
    assert "candidate 'other-model'" in caveat(d, "model_differs")
    assert "max_tokens: before 4096, candidate 2048, restored 4096" in caveat(
        d, "matrix_settings_differ"
    )


def test_material_regression_is_a_caveat():
    d = decide(*trial([(8000, 1, 2.0, 1.6, 2.0), (32000, 4, 10.0, 11.5, 10.2)]))
    assert d.decision == "promote"
    assert "at least 10% slower than both controls in: ~25K/C4" in caveat(d, "material_regression")


# ---------------------------------------------------------------- engine facts


def test_token_slots_change_is_shown_like_the_seed():
    assert fmt_change(1_330_579, 1_844_162) == "1,330,579 → 1,844,162 (+38.60%)"
    assert fmt_change(1_330_579, 789_904) == "1,330,579 → 789,904 (-40.63%)"
    runs = trial(
        LAYOUT,
        before={"slots": [665_290, 665_289]},  # TP2 as two endpoints: summed
        candidate={"slots": [1_844_162]},
        restored={"slots": [665_290, 665_289]},  # the original, restored
    )
    d = decide(*runs)
    assert d.engine.token_slots_vs_before == "1,330,579 → 1,844,162 (+38.60%)"
    text = render(d)
    assert "Token slots, before → candidate: 1,330,579 → 1,844,162 (+38.60%)" in text
    assert "Token slots, restored → candidate: 1,330,579 → 1,844,162 (+38.60%)" in text


def test_spec_decode_acceptance_beside_the_decision():
    spec = {"drafts": 100.0, "draft_tokens": 300.0, "accepted_tokens": 186.0}
    d = decide(*trial(DFLASH, candidate={"spec_decode": spec, "label": "DFlash2 K3"}))
    cand = d.arm("candidate")
    assert cand.spec_decode_acceptance_rate == pytest.approx(0.62)
    assert cand.spec_decode_mean_acceptance_length == pytest.approx(2.86)
    text = render(d)
    line = next(x for x in text.splitlines() if "Spec-decode acceptance" in x)
    assert "62.0% (mean length 2.86)" in line and line.count("—") == 2
    assert "Candidate (DFlash2 K3)" in text
    assert "Spec-decode" not in render(decide(*trial(DFLASH)))


# ---------------------------------------------------------------- output


def test_json_round_trip(tmp_path, capsys):
    rc, out, _ = cli([*write_runs(tmp_path, trial(DFLASH)), "--json"], capsys)
    assert rc == 0
    d = Decision.model_validate_json(out)
    assert d.decision == "retain original" and (d.wins, d.cells_total) == (0, 4)
    assert (d.before_run_id, d.candidate_run_id, d.restored_run_id) == (
        "before",
        "candidate",
        "restored",
    )
    raw = json.loads(out)
    cell6k4 = next(c for c in raw["cells"] if c["label"] == "~6K/C4")
    assert cell6k4["candidate"]["e2e_median_s"] == pytest.approx(4.962)
    assert cell6k4["verdict"] == "inconclusive" and cell6k4["win"] is False
    assert cell6k4["reliable"] is False and cell6k4["inconclusive_reasons"] == ["controls_disagree"]
    assert raw["card"].startswith("0/4 material wins (1 inconclusive) — at least 10% lower")
    assert raw["restoration"]["matched"] is True and raw["promotion_blocked"] is None
    assert d == decide(
        *trial(DFLASH), run_dirs={r: str(tmp_path / r) for r in ("before", "candidate", "restored")}
    )


def test_markdown_report_is_written_beside_the_text(tmp_path, capsys):
    md = tmp_path / "decision.md"
    rc, out, _ = cli([*write_runs(tmp_path, trial(DFLASH)), "--markdown", str(md)], capsys)
    assert rc == 0 and f"markdown report: {md}" in out
    text = md.read_text()
    assert text.startswith("# Decision: retain original — 0/4 material wins\n")
    assert "| ~6K | 4 | 5.061 | 4.962 | 5.807 |" in text
    assert "## Caveats" in text and "[controls_disagree]" in text
    assert "| ~6K | 4 | 1.96% faster | 14.55% faster | 12.85% | inconclusive |" in text


def test_a_cell_without_completed_requests_has_no_verdict_and_labels_its_target():
    dead = [rep(i, [], failed=4, failures={"read_timeout": 4}) for i in (1, 2, 3)]
    b, _, r = trial([(8000, 1, 2.0, 1.0, 2.0)])
    c = record("candidate", [cell(8000, 1, reps=dead)])
    d = decide(b, c, r)
    assert d.cells[0].verdict == "no data" and d.decision == "retain original"
    assert "~6K/C1: no completed timed request in candidate: no verdict, not a win" in d.reasons
    assert "candidate ~6K/C1 12/12 (12 read_timeout)" in caveat(d, "request_failures")
    assert "Timed requests completed: 24/36 — 12 before, 0 candidate, 12 restored; 12 failed" in (
        render(d)
    )
    blind = [rep(1, [1.0, 1.1, 1.2, 1.3]).model_copy(update={"input_tokens": []})]
    runs = [record(x, [cell(8000, 1, reps=blind)]) for x in ("before", "candidate", "restored")]
    text = render(decide(*runs))
    assert "~8000 target/C1" in text and "  Input  " in text and "Actual input" not in text
