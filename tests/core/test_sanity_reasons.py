"""The load's sanity reason: degenerate HTTP 200 answers above the bound FAIL the run,
with the words; fewer are a note; a run that did not check says nothing."""

from __future__ import annotations

from typing import Any

from soak.cli.parser import build_parser, cli_values
from soak.judge.facts import RunFacts
from soak.judge.limits import MAX_SANITY_SHARE, SANITY_MIN_FLAGGED, limits_from_config
from soak.judge.sanity import sanity_reasons
from soak.judge.verdict import decide
from soak.record.models import LoadSummary, Status
from soak.run.config_load import load_config


def load(**kw: Any) -> LoadSummary:
    base: dict[str, Any] = dict(
        requested_concurrency=8,
        workers_started=8,
        barrier_released=True,
        completed=4100,
        issued=4100,
        sanity_checked=True,
    )
    return LoadSummary(**(base | kw))


def test_a_degenerate_share_above_the_bound_fails_with_the_words() -> None:
    summary = load(sanity_flagged=312, sanity_by_flag={"runaway_whitespace": 25, "repetition": 287})
    status, reasons = decide(RunFacts(load=summary))
    assert status is Status.FAILED
    failed = [r for r in reasons if r.effect == "failed"]
    assert [r.code for r in failed] == ["load_sanity"]
    assert failed[0].message == (
        "312 of 4,100 load responses (7.6 %) were degenerate with HTTP 200: "
        "287 repetition, 25 runaway_whitespace (allowed: 1.0 %)"
    )


def test_below_the_bound_is_a_note_and_the_run_passes() -> None:
    summary = load(sanity_flagged=3, sanity_by_flag={"empty_visible": 3})
    status, reasons = decide(RunFacts(load=summary))
    assert status is Status.PASSED
    note = next(r for r in reasons if r.code == "load_sanity")
    assert note.effect == "note"
    assert note.message.startswith("3 of 4,100 load responses (<0.1 %) were degenerate")
    assert "within the 1.0 % allowed" in note.message


def test_a_few_flagged_responses_in_a_short_run_are_a_note() -> None:
    few = SANITY_MIN_FLAGGED - 1
    summary = load(completed=50, issued=50, sanity_flagged=few, sanity_by_flag={"repetition": few})
    (reason,) = sanity_reasons(summary, MAX_SANITY_SHARE)
    assert reason.effect == "note"
    enough = load(completed=50, issued=50, sanity_flagged=5, sanity_by_flag={"repetition": 5})
    assert sanity_reasons(enough, MAX_SANITY_SHARE)[0].effect == "failed"


def test_the_bound_comes_from_the_config() -> None:
    summary = load(sanity_flagged=312, sanity_by_flag={"repetition": 312})
    limits = limits_from_config({"max_sanity_share": 0.1})
    status, _ = decide(RunFacts(load=summary, **limits))
    assert status is Status.PASSED
    assert limits_from_config({})["max_sanity_share"] == MAX_SANITY_SHARE


def test_unchecked_or_clean_loads_say_nothing() -> None:
    unchecked = load(sanity_checked=False)
    assert sanity_reasons(unchecked, MAX_SANITY_SHARE) == []
    assert sanity_reasons(load(), MAX_SANITY_SHARE) == []
    assert sanity_reasons(None, MAX_SANITY_SHARE) == []
    # an older record (no sanity keys at all) reads as not checked
    old = LoadSummary(requested_concurrency=1, workers_started=1, barrier_released=True)
    assert old.sanity_checked is False


def test_no_sanity_turns_the_checks_off_and_the_default_is_on() -> None:
    args = ["run", "--endpoint", "http://127.0.0.1:8000", "--model", "m"]
    on = load_config(cli_values(build_parser().parse_args(args)), environ={})
    off = load_config(cli_values(build_parser().parse_args([*args, "--no-sanity"])), environ={})
    assert (on.sanity_checks, off.sanity_checks) == (True, False)
    assert on.public_dict()["max_sanity_share"] == MAX_SANITY_SHARE
