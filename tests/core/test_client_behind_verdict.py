"""The ``client_behind`` rule: a client persistently behind the server's writes (found
bytes already queued in the socket on too many sampled reads, ``loadgen.read_health``)
makes the run INVALID; a short stretch, or nothing measured, is no verdict."""

from __future__ import annotations

import orjson

from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats, behind_health
from loadgen.read_health import ReadTally
from soak.judge.facts import RunFacts
from soak.judge.limits import limits_from_config
from soak.judge.verdict import decide
from soak.record.journal import request_line
from soak.record.journal_lines import RequestLine
from soak.record.models import ClientHealth
from soak.run.config import RunConfig


def test_persistently_behind_makes_the_run_invalid_with_words_to_act_on():
    health = ClientHealth(
        behind_fraction=0.41,
        behind_samples=9000,
        behind_over_limit_s=40.0,
        behind_fraction_in_streak=0.63,
    )
    status, reasons = decide(
        RunFacts(health=health, client_overload_s=10.0, max_client_behind=0.25)
    )
    assert status.value == "INVALID"
    assert [(r.code, r.effect) for r in reasons] == [("client_behind", "invalid")]
    assert reasons[0].message == (
        "the client found data already waiting in the socket on 63% of sampled reads for "
        "40 s (limit 25% for 10 s): it read slower than the server wrote, so its ITL/TTFT "
        "include its own queueing — the client is the bottleneck: rerun with --shards 2 "
        "(or lower the load)"
    )


def test_a_short_stretch_or_nothing_measured_is_no_verdict():
    short = ClientHealth(behind_over_limit_s=9.0, behind_fraction_in_streak=0.9)
    assert decide(RunFacts(health=short, client_overload_s=10.0))[0].value == "PASSED"
    unmeasured = ClientHealth(behind_fraction=None, behind_samples=0, behind_over_limit_s=None)
    assert decide(RunFacts(health=unmeasured))[0].value == "PASSED"


def test_the_limit_is_a_run_option_read_back_from_config():
    cfg = RunConfig.model_validate(
        {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "max_client_behind": 0.5}
    )
    assert limits_from_config(cfg.public_dict())["max_client_behind"] == 0.5
    assert limits_from_config({})["max_client_behind"] == 0.25  # an older config.json


def test_the_live_streak_becomes_the_records_health_and_the_verdict():
    tally = ReadTally()
    live = LiveLoadStats(window_s=10, tally=tally)
    for s in range(14):  # 12 s of 70 % behind between two healthy seconds
        tally.samples += 40
        tally.hits += 28 if 1 <= s <= 12 else 0
        live.tick_reads(s + 1.0, bound=0.25, measuring=True)
    figures = behind_health(live)
    assert figures["behind_over_limit_s"] == 11.0
    assert figures["behind_fraction_in_streak"] == 0.7
    assert figures["behind_samples"] == 14 * 40
    health = ClientHealth(**figures)
    status, reasons = decide(RunFacts(health=health, client_overload_s=10.0))
    assert status.value == "INVALID" and reasons[0].code == "client_behind"


def test_the_journal_line_carries_the_samples_only_when_one_found_bytes_queued():
    r = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0, end_ns=10)
    r.queue_samples = 8
    quiet = orjson.loads(request_line(r, 0))
    assert "queue_samples" not in quiet  # a client that keeps up: the line as before
    r.queue_hits, r.queued_bytes_max = 3, 4096
    line = orjson.loads(request_line(r, 0))
    assert (line["queue_samples"], line["queue_hits"], line["queued_bytes_max"]) == (8, 3, 4096)
    assert RequestLine.model_validate(line).model_dump(mode="json") == line


def test_behind_on_most_reads_of_the_load_is_invalid_though_no_stretch_lasted():
    """A load whose streams start and end together dips below the bound now and then, so
    no stretch reached 10 s (the bench's 2,048 streams: 89% behind, longest 5 s) — yet
    it was behind on most reads: the whole load's share judges it."""
    health = ClientHealth(
        behind_fraction=0.894,
        behind_samples=30_000,
        behind_over_limit_s=5.0,
        behind_fraction_in_streak=0.95,
    )
    status, reasons = decide(RunFacts(health=health, client_overload_s=10.0))
    assert status.value == "INVALID" and [r.code for r in reasons] == ["client_behind"]
    assert "on 89% of 30,000 sampled reads over the load (limit 25%)" in reasons[0].message
    # Too few samples to judge the load alone: a blip at the start of a short run.
    few = health.model_copy(update={"behind_samples": 120})
    assert decide(RunFacts(health=few, client_overload_s=10.0))[0].value == "PASSED"
    # A load mostly keeping up (10%) with a 5 s stretch behind: no verdict.
    fine = health.model_copy(update={"behind_fraction": 0.10})
    assert decide(RunFacts(health=fine, client_overload_s=10.0))[0].value == "PASSED"
