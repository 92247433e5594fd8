"""``--ray HOST:PORT``: the config checked before any run directory exists
(soak.run.config_ray), and what the judge says of a Ray shard's journal and loss."""

from __future__ import annotations

import importlib.util

import pytest

from soak.judge.shard_reasons import shard_reasons
from soak.record.models import ShardInfo
from soak.run.config import ConfigError
from soak.run.config_load import load_config

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny", "concurrency": 8}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            {"ray": "10.0.0.5", "shards": 2},
            "ray = '10.0.0.5': give the cluster's address as HOST:PORT",
        ),
        ({"ray": "10.0.0.5:6379"}, "ray = '10.0.0.5:6379' needs --shards 2 or more"),
        ({"ray": "10.0.0.5:6379", "shards": "auto"}, "auto counts this host's cores"),
    ],
)
def test_a_bad_ray_request_is_refused_in_words(extra, words):
    with pytest.raises(ConfigError) as e:
        load_config({**BASE, **extra}, environ={}, base={})
    assert words in str(e.value)


def test_ray_without_the_extra_names_the_extra(monkeypatch):
    # The dev install has Ray; a default install does not: what find_spec says there.
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ConfigError) as e:
        load_config({**BASE, "ray": "10.0.0.5:6379", "shards": 2}, environ={}, base={})
    assert "needs Ray, which is not installed: pip install 'soaktop[distributed]'" in str(e.value)


def test_a_good_ray_request_is_kept():
    cfg = load_config({**BASE, "ray": "10.0.0.5:6379", "shards": 2}, environ={}, base={})
    assert (cfg.ray, cfg.shards) == ("10.0.0.5:6379", 2)


def _shard(index: int, **kw: object) -> ShardInfo:
    base: dict[str, object] = {"index": index, "host": "10.0.0.7", "workers": 4, "requests": 40}
    return ShardInfo.model_validate({**base, "status": "done", **kw})


def test_a_journal_that_differs_from_what_arrived_invalidates_the_run_by_name():
    same = {"journal_sha256": "a" * 64, "received_sha256": "a" * 64}
    shards = [
        _shard(0, **same, journal_lines=45, received_lines=45),
        _shard(1, journal_sha256="b" * 64, received_sha256="c" * 64, journal_lines=45,
               received_lines=44),
    ]  # fmt: skip
    reasons = shard_reasons(shards, max_loop_lag_s=1.0)
    assert [(r.code, r.effect) for r in reasons] == [("shard_journal_mismatch", "invalid")]
    assert reasons[0].message.startswith("shard 1 (the 2nd of 2): its journal on 10.0.0.7")
    assert "45 lines" in reasons[0].message and "44 lines" in reasons[0].message


def test_a_lost_host_is_named_in_the_lost_shard_reason():
    lost = _shard(1, status="lost", lost_why="its host, node 10.0.0.8 (abc), was lost")
    (reason,) = shard_reasons([_shard(0), lost], max_loop_lag_s=1.0)
    assert reason.code == "shard_lost" and "was lost" in reason.message
    assert reason.message.startswith("shard 1 (the 2nd of 2) lost (host lost, no exit status)")
