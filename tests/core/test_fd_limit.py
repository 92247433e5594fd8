"""The open-file limit: raised to the hard one, and a run it cannot hold refused in words."""

from __future__ import annotations

import resource

from soak.run.config import RunConfig
from soak.run.config_load import load_config
from soak.run.fd_limit import FD_MARGIN, fd_problem, streams_in_one_process

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}


def _cfg(**kw: object) -> RunConfig:
    return load_config(kw, environ={}, base=BASE)


def test_each_process_counts_its_own_share_of_the_streams() -> None:
    assert streams_in_one_process(_cfg(concurrency=10_000)) == (10_000, "concurrency = 10000")
    streams, words = streams_in_one_process(_cfg(concurrency=10_000, shards=3))
    assert streams == 3_334 and words.endswith("over 3 shards (3,334 a shard)")
    open_loop = _cfg(arrival="poisson", rate=50, max_in_flight=2_000, concurrency=8)
    assert streams_in_one_process(open_loop)[0] == 2_000  # the cap, not the warmed few
    assert streams_in_one_process(_cfg(concurrency=10_000, shards=2, ray="127.0.0.1:6379"))[0] == 0


def test_a_load_the_hard_limit_cannot_hold_is_refused_naming_the_way_out() -> None:
    words = fd_problem(_cfg(concurrency=10_000), hard_limit=4_096)
    assert words is not None
    assert words.startswith("concurrency = 10000: one process would hold 10,000 connections")
    assert f"at most {4_096 - FD_MARGIN:,} streams a process" in words
    assert "--shards 3" in words and "ulimit -Hn" in words
    # Shards hold their shares: 3 of them fit where one did not.
    assert fd_problem(_cfg(concurrency=10_000, shards=3), hard_limit=4_096) is None
    assert fd_problem(_cfg(concurrency=100), hard_limit=1_024) is None


def test_the_hard_limit_is_the_bound_not_a_shells_soft_one() -> None:
    """A shell's soft 1,024 under a hard 8,192: 2,000 streams fit (the load raises its
    soft limit itself); the process's own limit is read when none is given."""
    assert fd_problem(_cfg(concurrency=2_000), hard_limit=8_192) is None
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY:
        too_many = min(100_000, hard)  # the config's own bound
        words = fd_problem(_cfg(concurrency=too_many))
        assert (words is None) == (too_many + FD_MARGIN <= hard)
