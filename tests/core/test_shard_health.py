"""Per-shard health live, ``--shards auto`` and the "add a shard" hint (issue 17 §1, §3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.judge.facts import RunFacts
from soak.judge.verdict import decide
from soak.record.models import ClientHealth, ShardInfo
from soak.record.snapshot import Snapshot
from soak.run.config import RunConfig
from soak.run.config_load import load_config
from soak.run.config_shards import auto_shards, is_local, resolve_auto
from soak.run.shard_health import SILENT_AFTER_S, BehindHint, ShardHealthReader, shard_view
from soak.run.shard_links import ShardLink

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}
HEALTHY = Path(__file__).parents[1] / "tui" / "fixtures" / "healthy"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# -- --shards auto ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "cores", "local", "n", "words"),
    [
        (512, 4, False, 2, "auto: 2 shards (3 spare cores of 4, 512 streams need 2)"),
        (512, 2, False, 1, "auto: 1 shard (1 spare core of 2, 512 streams need 2)"),
        (100, 16, False, 1, "auto: 1 shard (15 spare cores of 16, 100 streams need 1)"),
        (4096, 16, False, 15, "auto: 15 shards (15 spare cores of 16, 4096 streams need 16)"),
        (10_000, 128, False, 40, "auto: 40 shards (127 spare cores of 128, 10000 streams need 40)"),
        (
            100_000,
            256,
            False,
            64,
            "auto: 64 shards (255 spare cores of 256, 100000 streams need 391)",
        ),
        (64, 1, False, 1, "auto: 1 shard (0 spare cores of 1, 64 streams need 1)"),
        (
            1024,
            8,
            True,
            4,
            "auto: 4 shards (7 spare cores of 8, 1024 streams need 4; the server is on this "
            "host and shares its cores)",
        ),
    ],
)
def test_auto_is_one_shard_per_spare_core_and_no_more_than_the_streams_need(
    streams, cores, local, n, words
):
    assert auto_shards(streams, cores, local) == (n, words)


def test_auto_on_a_load_shards_cannot_do_yet_is_one_shard_said_so():
    cfg = load_config(BASE | {"shards": "auto", "turns": 3}, environ={})
    assert cfg.shards == 1
    assert cfg.shards_auto == "auto: 1 shard (turns = 3 is not yet supported with --shards)"


def test_the_config_keeps_the_request_the_number_and_the_reason():
    cfg = load_config(BASE | {"shards": "AUTO", "concurrency": 600}, environ={})
    assert cfg.shards_auto is not None and cfg.shards_auto.startswith(f"auto: {cfg.shards} shard")
    assert "600 streams need 3; the server is on this host" in cfg.shards_auto  # loopback
    # Resolved again with 8 cores: the same config, 3 shards (600 streams need 3).
    cfg.shards_auto = "auto"
    resolve_auto(cfg, cores=8)
    assert (cfg.shards, cfg.shards_auto) == (
        3,
        "auto: 3 shards (7 spare cores of 8, 600 streams need 3; the server is on this host "
        "and shares its cores)",
    )
    # config.json read back (recover, verify): the number and its words, as written.
    again = RunConfig.model_validate(cfg.public_dict())
    assert (again.shards, again.shards_auto) == (cfg.shards, cfg.shards_auto)
    # A number given: no words.
    assert load_config(BASE | {"shards": "2", "concurrency": 8}, environ={}).shards_auto is None


def test_a_server_elsewhere_is_not_said_to_share_the_cores():
    assert is_local(["http://localhost:8000/v1"]) and is_local(["http://[::1]:8000"])
    assert not is_local(["http://10.0.0.7:8000", "http://gpu-node:8000"])


# -- per-shard health -------------------------------------------------------------------


def _links() -> list[ShardLink]:
    links = [ShardLink(k, 4) for k in range(3)]
    for link in links:
        link.status = "running"
        link.beat = {"in_flight": 4, "lag_s": 0.003}
        link.requests = 100
    return links


def test_each_shard_is_read_from_its_link_and_a_lost_one_says_so():
    clock = Clock()
    reader = ShardHealthReader(max_loop_lag_s=0.25, max_behind=0.25, clock=clock)
    links = _links()
    links[1].status = "lost"
    links[2].beat = {"in_flight": 3, "lag_s": 0.31}  # its loop lagged past the limit
    clock.t += 0.5
    got = reader.read(links)
    assert [(s.index, s.status, s.warning) for s in got] == [
        (0, "running", None),
        (1, "lost", None),
        (2, "running", "lag 310 ms"),
    ]
    assert (got[0].workers, got[0].in_flight, got[0].requests) == (4, 4, 100)
    assert got[0].loop_lag_p99_s == 0.003 and got[0].last_heartbeat_age_s == 0.0


def test_a_shard_unheard_from_is_silent_and_a_new_heartbeat_clears_it():
    clock = Clock()
    reader = ShardHealthReader(0.25, 0.25, clock=clock)
    links = _links()
    reader.read(links)
    clock.t += SILENT_AFTER_S + 1
    links[0].beat = {"in_flight": 4, "lag_s": 0.002}  # shard 0 beat again; the others not
    got = reader.read(links)
    assert got[0].warning is None and got[0].last_heartbeat_age_s == 0.0
    assert got[1].warning == "silent 6 s" and got[1].last_heartbeat_age_s == 6.0


def test_a_shards_recent_behind_share_from_its_socket_samples():
    reader = ShardHealthReader(0.25, 0.25, clock=Clock())
    links = _links()
    assert reader.read(links)[0].behind_fraction is None  # nothing sampled yet
    links[0].q_samples, links[0].q_hits = 200, 100
    links[1].q_samples, links[1].q_hits = 200, 4
    links[2].q_samples = 20  # too few to say
    got = reader.read(links)
    assert (got[0].behind_fraction, got[0].warning) == (0.5, "behind 50%")
    assert (got[1].behind_fraction, got[1].warning) == (0.02, None)
    assert got[2].behind_fraction is None


def test_a_run_in_one_process_has_no_shards_key():
    assert shard_view(object(), ShardHealthReader(0.25, 0.25)) is None
    lines = (HEALTHY / "snapshots.jsonl").read_text().splitlines()
    for raw in lines[:3]:  # an older line without the key loads and writes back as it was
        snap = Snapshot.model_validate_json(raw)
        assert snap.shards is None and "shards" not in snap.model_dump(mode="json")
    shards = [{"index": 0, "status": "lost", "workers": 4, "requests": 9}]
    with_shards = Snapshot.model_validate(json.loads(lines[0]) | {"shards": shards})
    assert with_shards.model_dump(mode="json")["shards"][0]["status"] == "lost"


# -- the "add a shard" hint -------------------------------------------------------------


def test_the_behind_verdict_says_how_many_shards_to_rerun_with():
    health = ClientHealth(behind_over_limit_s=40.0, behind_fraction_in_streak=0.63)
    two = [ShardInfo(index=k, host="local", workers=4, requests=9, status="done") for k in (0, 1)]
    _, reasons = decide(RunFacts(health=health, client_overload_s=10.0, shards=two))
    assert reasons[0].code == "client_behind"
    assert reasons[0].message.endswith(
        "— the client is the bottleneck: rerun with --shards 3 (or lower the load)"
    )


def test_the_live_hint_comes_once_a_stretch_has_lasted():
    hint = BehindHint(shards=2, hold_s=10.0)
    assert hint.check(None, 50.0, None) is None  # not behind
    assert hint.check(40.0, 49.0, 0.7) is None  # 9 s: not yet
    words = hint.check(40.0, 50.0, 0.7)
    assert words == (
        "the client found data already waiting in the socket on 70% of sampled reads for "
        "10 s: the client is the bottleneck: rerun with --shards 3"
    )
    assert hint.check(40.0, 51.0, 0.7) is None  # the same stretch: said once
    assert hint.check(60.0, 70.0, 0.5) is not None  # a new one, said again


# -- review fixes (R2) --------------------------------------------------------------------


def test_two_heartbeats_between_ticks_are_still_a_new_heartbeat():
    """Parsed heartbeats are fresh dicts; CPython hands a freed dict's address to the next
    one, so a reader that keyed on ``id()`` took the third beat for the first."""
    import orjson

    clock = Clock()
    reader = ShardHealthReader(0.25, 0.25, clock=clock)
    (link,) = _links()[:1]
    link.beat = orjson.loads(b'{"in_flight": 4, "lag_s": 0.003}')
    reader.read([link])
    clock.t += SILENT_AFTER_S + 1
    link.beat = orjson.loads(b'{"in_flight": 4, "lag_s": 0.004}')  # two beats, one tick
    link.beat = orjson.loads(b'{"in_flight": 4, "lag_s": 0.005}')
    (got,) = reader.read([link])
    assert (got.last_heartbeat_age_s, got.warning) == (0.0, None)


def test_a_running_shard_that_never_beat_is_silent_in_the_end():
    clock = Clock()
    reader = ShardHealthReader(0.25, 0.25, clock=clock)
    link = ShardLink(0, 4)
    link.status = "running"  # spawned: its first heartbeat is due within about 2 s
    (got,) = reader.read([link])
    assert (got.last_heartbeat_age_s, got.warning) == (None, None)
    clock.t += 3.0
    assert reader.read([link])[0].warning is None  # still starting (imports, its client)
    clock.t += 2 * SILENT_AFTER_S
    (got,) = reader.read([link])
    assert got.last_heartbeat_age_s is None  # never heard from
    assert got.warning == f"silent {3 + 2 * SILENT_AFTER_S:.0f} s"


@pytest.mark.parametrize("tick_s", [0.1, 1.0])
def test_the_recent_behind_share_looks_back_in_seconds_whatever_the_tick(tick_s):
    """A shard 100% behind for 5 s, then keeping up for 5 s: over the last 10 s it is 50%
    behind, at a 1 s snapshot interval or a 0.1 s one."""
    clock = Clock()
    reader = ShardHealthReader(0.25, 0.9, clock=clock)
    (link,) = _links()[:1]
    reader.read([link])
    got = None
    for k in range(round(10 / tick_s)):
        clock.t += tick_s
        second = int(round(k * tick_s, 6))  # the shard reports its counts once a second
        link.q_samples = 100 * (second + 1)
        link.q_hits = 100 * min(second + 1, 5)
        (got,) = reader.read([link])
    assert got is not None and got.behind_fraction == 0.5
