"""``soaktop scout``'s plan: the arms, the order's bracketing rule, the seeded order, the
errors that name the flag before anything runs; the switch's scrubbing and its bounds;
how the triples' decisions combine."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from soak.after.decide_model import Decision
from soak.cli.main import main
from soak.cli.scout_plan import ScoutPlanError, Triple, build_plan, parse_order
from soak.cli.scout_result import TripleResult, combine
from soak.run.scout_switch import SwitchError, run_command, scrub_secrets, wait_ready

ARMS = ["original=./switch.sh orig", "candidate=./switch.sh cand"]


def test_the_default_is_original_candidate_restored_one_triple():
    plan = build_plan(ARMS)
    assert plan.original.name == "original" and plan.original.command == "./switch.sh orig"
    assert plan.candidate.command == "./switch.sh cand"
    assert [(s.n, s.arm, s.role) for s in plan.steps()] == [
        (1, "original", "original"),
        (2, "candidate", "candidate"),
        (3, "original", "restored"),
    ]
    assert plan.triples() == [Triple(before=1, candidate=2, restored=3)]


@pytest.mark.parametrize(
    ("order", "triples"),
    [
        ("ababa", [(1, 2, 3), (3, 4, 5)]),  # the middle original controls both
        ("abaaba", [(1, 2, 3), (4, 5, 6)]),  # each triple its own controls
        ("A/B/A", [(1, 2, 3)]),  # separators and case are forgiven
    ],
)
def test_interleaved_orders_are_triples_around_each_candidate_run(order, triples):
    plan = build_plan(ARMS, order=order)
    assert [(t.before, t.candidate, t.restored) for t in plan.triples()] == triples
    assert plan.steps()[0].role == "original"
    assert all(s.role == "restored" for s in plan.steps()[1:] if s.arm == "original")


@pytest.mark.parametrize(
    ("order", "words"),
    [
        ("ab", "ends with the candidate"),
        ("bab", "starts with the candidate"),
        ("abba", "two candidate runs are side by side"),
        ("aaa", "no candidate run"),
        ("axa", "write the runs as a (original) and b (candidate)"),
        ("random:x", "random:K takes a whole number"),
        ("random:0", "K must be from 1"),
        ("random:2", "needs --seed N"),
    ],
)
def test_an_order_without_brackets_is_refused_naming_the_flag(order, words):
    with pytest.raises(ScoutPlanError) as e:
        parse_order(order, None)
    assert str(e.value).startswith(f"--order {order!r}") and words in str(e.value)


def test_a_seed_draws_a_bracketed_order_and_the_same_seed_the_same_one():
    orders = {seed: parse_order("random:4", seed) for seed in range(20)}
    assert orders[3] == parse_order("random:4", 3)
    assert len(set(orders.values())) > 1  # the seed does draw something
    for order in orders.values():
        assert order.count("b") == 4 and order[0] == order[-1] == "a" and "bb" not in order
        plan = build_plan(ARMS, order="random:4", seed=0)
        assert len(plan.triples()) == 4


def test_a_seed_with_an_explicit_order_is_refused():
    with pytest.raises(ScoutPlanError, match=r"--seed 3: only --order random:K"):
        parse_order("aba", 3)


@pytest.mark.parametrize(
    ("arms", "words"),
    [
        (ARMS[:1], "exactly two arms"),
        ([*ARMS, "third=./x"], "exactly two arms"),
        (["original", "candidate=./x"], "expected NAME=COMMAND"),
        (["original=./a", "original=./b"], "both arms are named 'original'"),
        (["9lives=./a", "candidate=./b"], "must start with a letter"),
        (["original=./a\n./b", "candidate=./b"], "one line"),
    ],
)
def test_bad_arms_are_refused_naming_the_flag(arms, words):
    with pytest.raises(ScoutPlanError) as e:
        build_plan(arms)
    assert str(e.value).startswith("--arm") and words in str(e.value)


def test_arm_recipes_belong_to_one_arm_and_are_checked():
    plan = build_plan(ARMS, arm_recipe=["candidate:kv_cache_dtype=fp8", "original:note=mtp3"])
    assert plan.candidate.recipe == {"kv_cache_dtype": "fp8"}
    assert plan.original.recipe == {"note": "mtp3"}
    for item, words in [
        ("nobody:k=v", "no arm named 'nobody'"),
        ("candidate=fp8", "expected ARM:KEY=VALUE"),
        ("candidate:Bad Key=v", "recipe key 'Bad Key'"),
    ]:
        with pytest.raises(ScoutPlanError) as e:
            build_plan(ARMS, arm_recipe=[item])
        assert str(e.value).startswith(f"--arm-recipe {item!r}") and words in str(e.value)


def test_an_arm_may_attach_its_own_launch_command(tmp_path):
    """``--arm-server-cmd-file ARM:FILE``: that arm's runs attach its command (the other
    arm keeps ``--server-cmd-file``); a bad item names the flag, a missing file the arm."""
    from soak.cli.scout import _arm_configs
    from soak.run.config import RunConfig

    cand, orig = tmp_path / "cand.sh", tmp_path / "orig.sh"
    cand.write_text("vllm serve m --max-num-seqs 64\n")
    orig.write_text("vllm serve m --max-num-seqs 32\n")
    plan = build_plan(ARMS, arm_server_cmd_file=[f"candidate:{cand}"])
    assert plan.candidate.server_cmd_file == cand and plan.original.server_cmd_file is None
    base = RunConfig.model_validate(
        {
            "endpoints": ["http://127.0.0.1:1"],
            "model": "m",
            "matrix": "input=64 concurrency=1 reps=3 requests=4",
            "server_cmd_file": orig,
        }
    )
    configs = _arm_configs(base, plan, False, tmp_path / "scout")
    assert [c.server_cmd_file for c in configs.values()] == [orig, cand, orig]
    for item, words in [
        ("nobody:/x", "no arm named 'nobody'"),
        ("candidate", "expected ARM:FILE"),
    ]:
        with pytest.raises(ScoutPlanError, match=words):
            build_plan(ARMS, arm_server_cmd_file=[item])
    with pytest.raises(ScoutPlanError, match="given twice"):
        build_plan(ARMS, arm_server_cmd_file=[f"candidate:{cand}", f"candidate:{orig}"])
    missing = build_plan(ARMS, arm_server_cmd_file=[f"candidate:{tmp_path / 'gone.sh'}"])
    with pytest.raises(
        ValueError, match=r"arm candidate: .*server_cmd_file.*gone\.sh.*does not exist"
    ):
        _arm_configs(base, missing, False, tmp_path / "scout")


def test_the_cli_refuses_a_bad_scout_before_anything_runs(tmp_path, capsys):
    base = ["scout", "--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path)]
    matrix = ["--matrix", "input=64 concurrency=1,2 reps=3 requests=4"]
    cases = [
        ([*base, "--arm", ARMS[0], "--arm", ARMS[1]], "--matrix is required"),
        ([*base, *matrix, "--arm", ARMS[0]], "exactly two arms"),
        ([*base, *matrix, "--arm", ARMS[0], "--arm", ARMS[1], "--order", "abb"], "--order"),
        ([*base, *matrix, "--arm", ARMS[0], "--arm", ARMS[1], "--min-wins", "3"], "only 2 cells"),
        ([*base, *matrix, "--arm", ARMS[0], "--arm", ARMS[1], "--concurrency", "0"], "concurrency"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        assert words in capsys.readouterr().err, argv
    assert list(tmp_path.iterdir()) == []  # nothing was made


def test_secrets_in_a_command_or_its_output_are_scrubbed():
    text = (
        "HF_TOKEN=hf_abc123 vllm serve m --api-key sk-live-1 --hf-token=xyz "
        "-H 'Authorization: Bearer abcdefgh12345' DB_PASSWORD='p w' OPENAI_API_KEY=k9 "
        "--max-num-seqs 32 the-run-key-value"
    )
    out = scrub_secrets(text, ["the-run-key-value"])
    for secret in ("hf_abc123", "sk-live-1", "xyz", "abcdefgh12345", "p w", "k9", "the-run-key"):
        assert secret not in out, out
    assert "--max-num-seqs 32" in out and out.count("<secret>") == 7, out


def test_a_switch_writes_its_scrubbed_log_and_is_bounded(tmp_path):
    log = tmp_path / "switch-1-a.log"
    took = run_command(
        "echo token=hunter22; echo started", log, time.monotonic() + 30, title="step 1"
    )
    assert took < 30
    text = log.read_text()
    assert "hunter22" not in text and "started" in text and "exited with 0" in text
    assert not list(tmp_path.glob(".*.raw"))
    with pytest.raises(SwitchError, match="exited with 3"):
        run_command("exit 3", log, time.monotonic() + 30)
    started = time.monotonic()
    with pytest.raises(SwitchError, match="ran longer"):
        run_command(f"{sys.executable} -c 'import time; time.sleep(60)'", log, started + 1)
    assert time.monotonic() - started < 15  # stopped, not waited for


def test_waiting_for_an_endpoint_that_never_answers_ends_naming_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connection refused
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(SwitchError) as e:
        wait_ready([url], "m", {}, time.monotonic() + 1.0)
    assert url in str(e.value) and "did not serve 'm'" in str(e.value)


def _decision(verdict: str) -> Decision:
    return Decision(
        decision=verdict,  # type: ignore[arg-type]
        wins=1 if verdict == "promote" else 0,
        cells_total=1,
        min_wins=1,
        min_gain_pct=10.0,
        rule="",
        before_run_id="a",
        candidate_run_id="b",
        restored_run_id="c",
        arms=[],
        cells=[],
        reasons=["0/1 material wins"],
    )


def test_the_scout_promotes_only_when_every_triple_promotes():
    def t(verdict: str | None, refused: list[str] | None = None) -> TripleResult:
        d = _decision(verdict) if verdict else None
        return TripleResult(before=1, candidate=2, restored=3, decision=d, refused=refused or [])

    assert combine([t("promote")], 1)[::2] == ("promote", 0)
    assert combine([t("promote"), t("promote")], 2)[::2] == ("promote", 0)
    decision, words, code = combine([t("promote"), t("retain original")], 2)
    assert (decision, code) == ("retain original", 0) and "1 of 2 triples promote" in words
    assert combine([t("promote"), t(None, ["cells differ"])], 2)[::2] == ("refused", 2)
    assert combine([t("promote")], 2)[::2] == ("incomplete", 1)
