"""``soaktop decide`` (issue 15): a restored arm that is not the original is refused or
blocks promotion, and a cell that cannot resolve the gain asked for is inconclusive.

Records are built the way ``tests/core/test_decide.py`` builds them, with identity
endpoints that state a version, token slots and recipe facts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from soak.after.decide import decide
from soak.after.decide_model import Decision, NotComparable
from soak.after.decide_render import render
from soak.after.report.decide_page import build_decide_page
from tests.core.test_decide import cell, cli, codes, record, rep, trial, write_runs

ROLES3 = ("before", "candidate", "restored")
WIN = [(8000, 4, 5.0, 4.0, 5.1)]
"""One cell the candidate wins: 20.00% / 21.57% faster, controls 1.96% apart."""
ORIGINAL: dict[str, Any] = {
    "version": "0.32.0",
    "slots": [262_144],
    "recipe": {"max_num_seqs": "32", "gpu_memory_utilization": "0.9"},
    "gpus": ["GPU-aaaa"],
}
"""The original's identity as its endpoint states it (seed 004's words)."""
CANDIDATE: dict[str, Any] = ORIGINAL | {
    "recipe": {"max_num_seqs": "64", "gpu_memory_utilization": "0.9"}
}


def arms(
    table: list[tuple[int, int, float, float, float]] = WIN, **kw: dict[str, Any]
) -> list[Any]:
    """The three records of ``table``: the original stated by before and restored, the
    candidate with 64 slots/replica, each overridable per role."""
    base = {"before": ORIGINAL, "candidate": CANDIDATE, "restored": ORIGINAL}
    return trial(table, **{role: base[role] | kw.get(role, {}) for role in ROLES3})


def the_issue_case() -> list[Any]:
    """Issue 15: the controls 17.3% apart, the candidate 24 output tokens against 37 and
    46, and faster than both by more than 10% — decide had promoted on it."""
    medians, outputs = (5.0, 4.0, 6.046), (37, 24, 46)
    return [
        record(
            role, [cell(8000, 4, m, outputs=o)], **(CANDIDATE if role == "candidate" else ORIGINAL)
        )
        for role, m, o in zip(ROLES3, medians, outputs, strict=True)
    ]


# ---------------------------------------------------------------- inconclusive cells


def test_the_issue_case_is_inconclusive_and_the_original_is_retained():
    d = decide(*the_issue_case())
    c = d.cells[0]
    assert c.beats_both and c.gain_vs_before_pct == pytest.approx(20.0)
    assert c.controls_apart_pct == pytest.approx(17.30, abs=0.005)
    assert c.verdict == "inconclusive" and not c.win and not c.reliable
    assert c.inconclusive_reasons == ["controls_disagree", "output_length_differs"]
    assert (d.decision, d.wins, d.inconclusive) == ("retain original", 0, 1)
    assert d.card == (
        "0/1 material wins (1 inconclusive) — at least 10% lower pooled median E2E required "
        "against both controls: retain the original"
    )
    reason = d.reasons[1]
    assert reason.startswith("~6K/C4: inconclusive: the controls are 17.30% apart (more than 10%)")
    assert "candidate output 24 tokens vs 37 (before) and 46 (restored)" in reason
    assert "20.00% faster than before and 33.84% faster than restored" in reason
    assert "which does not count" in reason
    text = render(d)
    assert d.card in text
    row = next(ln for ln in text.splitlines() if ln.split()[:3] == ["~6K", "4", "20.00%"])
    assert row.split()[-1] == "inconclusive"  # the verdict column of the change table


def test_the_issue_case_through_the_cli_json(tmp_path, capsys):
    rc, out, _ = cli([*write_runs(tmp_path, the_issue_case()), "--json"], capsys)
    assert rc == 0
    raw = json.loads(out)
    assert raw["decision"] == "retain original" and raw["inconclusive"] == 1
    assert raw["card"].startswith("0/1 material wins (1 inconclusive)")
    assert raw["cells"][0]["verdict"] == "inconclusive"
    assert raw["cells"][0]["inconclusive_reasons"] == ["controls_disagree", "output_length_differs"]
    assert raw["cells"][0]["beats_both"] is True and raw["cells"][0]["win"] is False
    assert raw["reasons"][1].startswith("~6K/C4: inconclusive: the controls are 17.30% apart")
    assert raw["restoration"]["matched"] is True
    assert Decision.model_validate_json(out).cells[0].verdict == "inconclusive"


@pytest.mark.parametrize(
    ("outputs", "verdict"),
    [
        ((37, 24, 46), "inconclusive"),  # far from both
        ((26, 24, 46), "win"),  # within 10% of before (8.3%): the same work as before
        ((30, 33, 40), "win"),  # exactly 10% above before: the boundary is not "more"
        ((30, 34, 30), "inconclusive"),  # controls alike, the candidate 13.3% from both
    ],
)
def test_output_length_makes_a_cell_inconclusive_only_when_far_from_both_controls(outputs, verdict):
    recs = [
        record(role, [cell(8000, 4, m, outputs=o)])
        for role, m, o in zip(ROLES3, (5.0, 4.0, 5.1), outputs, strict=True)
    ]
    c = decide(*recs).cells[0]
    assert c.beats_both and c.verdict == verdict
    assert c.inconclusive_reasons == (["output_length_differs"] if verdict != "win" else [])


@pytest.mark.parametrize(
    "sizes",
    [(3, 3), (2, 1, 1)],  # too few repetitions; too few pooled requests
)
def test_too_few_samples_make_a_winning_cell_inconclusive(sizes):
    reps, requests = len(sizes), sum(sizes)
    few = [rep(i + 1, [4.0] * n) for i, n in enumerate(sizes)]
    b, _, r = trial(WIN)
    c = record("candidate", [cell(8000, 4, reps=few)])
    d = decide(b, c, r)
    assert d.cells[0].beats_both and d.cells[0].verdict == "inconclusive"
    assert d.cells[0].inconclusive_reasons == ["few_samples"]
    assert d.decision == "retain original"
    assert f"too few samples (candidate {requests} requests in {reps} repetitions" in d.reasons[1]
    assert "few_samples" in codes(d)


def test_inconclusive_cells_do_not_count_but_a_conclusive_win_still_promotes():
    d = decide(*trial([(8000, 1, 2.0, 1.6, 2.0), (8000, 4, 5.0, 3.5, 6.0)]))
    assert [c.verdict for c in d.cells] == ["win", "inconclusive"]
    assert d.decision == "promote" and (d.wins, d.inconclusive) == (1, 1)
    assert d.card.startswith("1/2 material wins (1 inconclusive) — ")
    assert d.card.endswith(": promote the candidate")


# ---------------------------------------------------------------- restoration


def test_restoration_checks_are_said_like_seed_004():
    d = decide(*arms())
    assert d.decision == "promote" and d.restoration.matched
    assert d.restoration.summary == (
        "Original configuration restored: identity checks passed (model private-target, "
        "1 endpoint, version 0.32.0, 32 slots/replica, 90% GPU memory, 262,144 KV tokens, "
        "GPUs H200 GPU-aaaa)"
    )
    assert "engine version: version 0.32.0" in d.restoration.checked
    assert d.candidate_changes == ["64 slots/replica (original 32 slots/replica)"]
    assert d.promotion_blocked is None
    for out in (render(d), render(d, markdown=True)):
        assert d.restoration.summary in out
        assert "Candidate against the original: 64 slots/replica (original 32 slots/replica)" in out
    page = build_decide_page(d, plotly_js="/* stub */")
    assert '<section id="restoration">' in page
    assert "identity checks passed (model private-target, 1 endpoint, version 0.32.0" in page
    raw = json.loads(d.model_dump_json())
    assert raw["restoration"]["allowed_drift"] is False
    assert raw["candidate_changes"] == ["64 slots/replica (original 32 slots/replica)"]


def test_a_restored_arm_on_another_engine_version_is_refused(tmp_path, capsys):
    recs = arms(restored={"version": "0.33.0"})
    rc, out, err = cli(write_runs(tmp_path, recs), capsys)
    assert rc == 2 and out == ""
    assert "these runs cannot be compared" in err
    assert (
        "the restored run is not the original: engine version: original version 0.32.0, "
        "restored version 0.33.0" in err
    )
    assert "--allow-restoration-drift" in err


def test_a_restored_arm_with_other_token_slots_is_refused_naming_both():
    with pytest.raises(NotComparable) as e:
        decide(*arms(restored={"slots": [320_000]}))
    assert e.value.problems == [
        "the restored run is not the original: KV cache token slots per replica: original "
        "262,144 KV tokens, restored 320,000 KV tokens (--allow-restoration-drift decides "
        "anyway, and then never promotes)"
    ]


@pytest.mark.parametrize(
    ("before", "restored", "words"),
    [
        (
            {"declared": {"revision": "abc123"}},
            {"declared": {"revision": "def456"}},
            "original revision abc123, restored revision def456",
        ),
        ({}, {"gpus": ["GPU-bbbb"]}, "GPU set: original H200 GPU-aaaa, restored H200 GPU-bbbb"),
        ({}, {"slots": [131_072, 131_072]}, "endpoints: original 1, restored 2"),
        ({}, {"model": "other"}, "model: original private-target, restored other"),
    ],
)
def test_every_restoration_mismatch_is_a_named_refusal(before, restored, words):
    with pytest.raises(NotComparable) as e:
        decide(*arms(before=before, restored=restored))
    assert all(p.startswith("the restored run is not the original: ") for p in e.value.problems)
    assert any(words in p for p in e.value.problems), e.value.problems


def test_restoration_and_matrix_problems_are_named_together():
    b, _, r = arms(restored={"version": "0.33.0"})
    c = record("candidate", [cell(8000, 1, 1.0)], **CANDIDATE)
    with pytest.raises(NotComparable) as e:
        decide(b, c, r)
    first, *rest = e.value.problems
    assert first.startswith("the restored run is not the original: engine version")
    assert any("the runs do not have the same cells" in p for p in rest)


def test_allowed_restoration_drift_is_a_caveat_and_never_promotes(tmp_path, capsys):
    recs = arms(restored={"version": "0.33.0", "slots": [320_000]})
    rc, out, _ = cli([*write_runs(tmp_path, recs), "--allow-restoration-drift"], capsys)
    assert rc == 0
    assert "soaktop decide: retain original — 1/1 material wins" in out
    assert "Original configuration NOT restored (decided anyway: --allow-restoration-drift)" in out
    assert "[restoration_drift]" in out
    d = decide(*recs, allow_restoration_drift=True)
    assert d.cells[0].verdict == "win" and d.wins == 1  # measured as it was
    assert d.decision == "retain original"
    assert not d.restoration.matched and d.restoration.allowed_drift
    assert d.restoration.mismatches == [
        "engine version: original version 0.32.0, restored version 0.33.0",
        "KV cache token slots per replica: original 262,144 KV tokens, restored 320,000 KV tokens",
    ]
    assert d.promotion_blocked is not None
    assert d.card == (
        "1/1 material wins — at least 10% lower pooled median E2E required against both "
        "controls; restoration drifted: engine version: original version 0.32.0, restored "
        "version 0.33.0; KV cache token slots per replica: original 262,144 KV tokens, "
        "restored 320,000 KV tokens, so no win can be attributed to the candidate: retain "
        "the original"
    )
    assert codes(d)[0] == "restoration_drift"
    (tmp_path / "j").mkdir()
    rc, js, _ = cli(
        [*write_runs(tmp_path / "j", recs), "--allow-restoration-drift", "--json"], capsys
    )
    raw = json.loads(js)
    assert rc == 0 and raw["restoration"]["allowed_drift"] is True
    assert raw["restoration"]["matched"] is False and raw["decision"] == "retain original"


def test_a_restored_run_that_cannot_be_checked_cannot_promote():
    b, c, r = arms()
    r = r.model_copy(update={"identity": None})
    d = decide(b, c, r)
    assert d.cells[0].verdict == "win" and d.decision == "retain original"
    assert d.restoration.summary.startswith("Original configuration not checked: no identity")
    assert "restoration_unchecked" in codes(d) and "no_identity" in codes(d)
    assert "could not be checked against the original" in d.card


def test_a_candidate_that_changed_nothing_stated_or_declared_is_a_caveat():
    d = decide(*arms(candidate=ORIGINAL))
    assert d.candidate_changes == [] and d.decision == "promote"
    msg = next(c.message for c in d.caveats if c.code == "candidate_identical_recipe")
    assert "changed nothing the servers state or the operator declared" in msg
    assert "32 slots/replica" in msg
    assert "no stated or declared recipe fact differs" in render(d)
    # a declared change is a change
    declared = decide(*arms(candidate=ORIGINAL | {"declared": {"kv_layout": "paged-v2"}}))
    assert declared.candidate_changes == ["kv_layout paged-v2 (the original states none)"]
    assert "candidate_identical_recipe" not in codes(declared)


# ---------------------------------------------------------------- the runs' own limits


def test_the_runs_own_caveats_stand_beside_the_decision_once_each():
    """Seed 004's "Important caveat": what the records say their runs cannot show (a small
    natural-output scout, one run per arm) is listed once per code, in text, markdown,
    HTML and --json; without record caveats the section is absent."""
    from soak.record.sections import RecordCaveat

    scout = RecordCaveat(code="matrix_scout", message="a small natural-output scout")
    recs = arms()
    recs = [r.model_copy(update={"caveats": [scout]}) for r in recs]
    recs[1] = recs[1].model_copy(
        update={"caveats": [scout, RecordCaveat(code="one_run", message="one run")]}
    )
    d = decide(*recs)
    assert [(c.code, c.message) for c in d.run_caveats] == [
        ("matrix_scout", "a small natural-output scout"),
        ("one_run", "one run"),
    ]
    text = render(d)
    limits = text.split("What the runs cannot show", 1)[1]
    assert "- a small natural-output scout [matrix_scout]" in limits
    assert limits.count("[matrix_scout]") == 1
    assert "## What the runs cannot show" in render(d, markdown=True)
    assert "What the runs cannot show" in build_decide_page(d)
    assert json.loads(d.model_dump_json())["run_caveats"][1]["code"] == "one_run"
    assert "What the runs cannot show" not in render(decide(*arms()))
