"""``--shards``: the split, the request interleave, the line protocol, the judgement."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from loadgen.envelope import FailureClass, RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadPlan
from soak.after.shard_check import shard_problems
from soak.judge.shard_reasons import shard_name, shard_reasons
from soak.record.models import RunRecord, ShardInfo, Status
from soak.run.config import ConfigError
from soak.run.config_load import load_config
from soak.run.shard_links import copy_shard_log
from soak.run.shard_main import ShardWorkers, pool_from_spec, pool_spec
from soak.run.shard_protocol import (
    decode_result,
    encode_result,
    global_index,
    parse_line,
    shard_endpoints,
    share,
)

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}


@pytest.mark.parametrize("shards", [1, 2, 3, 7])
@pytest.mark.parametrize("total", [0, 1, 5, 8, 64, 101])
def test_shares_interleave_to_exactly_the_single_process_numbers(total, shards):
    numbers = [
        global_index(i, shards, k) for k in range(shards) for i in range(share(total, shards, k))
    ]
    assert sorted(numbers) == list(range(total))  # each worker (or request) once, none more
    sizes = [share(total, shards, k) for k in range(shards)]
    assert max(sizes) - min(sizes) <= 1  # as even as it can be


def test_a_concurrency_target_splits_as_the_workers_below_it():
    # 10 workers over 3 shards; a live target of 7 lets workers 0..6 issue: 0,3,6 / 1,4 / 2,5
    assert [share(7, 3, k) for k in range(3)] == [3, 2, 2]


def test_each_shard_worker_uses_the_endpoint_its_global_number_would():
    endpoints = ("a", "b", "c")
    for shards in (2, 3, 4):
        for k in range(shards):
            mine = shard_endpoints(endpoints, shards, k)
            for i in range(12):  # the worker's base: endpoints[index % len]
                assert mine[i % len(mine)] == endpoints[global_index(i, shards, k) % 3]


class _Instant:
    """A server that answers every request at once."""

    max_connections = 64

    async def warm_connection(self, url: str) -> None:
        return None

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        result.end_ns = result.sent_ns + 1
        result.status = 200
        await asyncio.sleep(0)
        return result


async def test_two_shards_send_the_requests_one_process_would():
    pool = PromptPool(tuple(Prompt(i, f"p{i}") for i in range(5)), "test")
    bodies = BodyBuilder(model="m")
    results: list[RequestResult] = []
    for k in range(2):
        plan = LoadPlan(
            endpoints=("http://x",),
            concurrency=share(6, 2, k),
            duration_s=None,
            max_requests=share(11, 2, k),
            drain_timeout_s=5,
            barrier_timeout_s=5,
            request_id_prefix="run/load/chat",
        )
        gen = ShardWorkers(plan, _Instant(), pool, bodies, results.append, shards=2, index=k)
        assert await gen.start_workers()
        await gen.run()
    ids = sorted(int(r.request_id.rsplit("/", 1)[1]) for r in results)
    assert ids == list(range(11))  # the single process's sequence numbers, once each
    assert all(r.prompt_id == pool.pick(int(r.request_id.rsplit("/", 1)[1])).id for r in results)


def test_a_result_crosses_the_pipe_whole():
    r = RequestResult(
        request_id="run/load/chat/7",
        worker=3,
        prompt_id=2,
        sent_ns=10,
        first_token_ns=20,
        end_ns=30,
        status=500,
        failure=FailureClass.HTTP_5XX,
        failure_detail="boom",
        itl_ns=[1, 2],
        sanity=("empty",),
        step=1,
        answer="never sent",
    )
    back = decode_result(encode_result(r, worker=7))
    assert back.worker == 7 and back.failure is FailureClass.HTTP_5XX
    assert back.sanity == ("empty",) and back.itl_ns == [1, 2] and back.step == 1
    assert back.answer is None  # a conversation's history stays in its shard
    r.worker, r.answer = 7, None
    assert back == r


def test_a_status_line_and_a_broken_line():
    assert parse_line(b'{"t": "hb", "in_flight": 3}\n') == {"t": "hb", "in_flight": 3}
    with pytest.raises(ValueError):
        parse_line(b"[1, 2]\n")  # a result of the wrong length
    with pytest.raises(ValueError):
        parse_line(b'{"no": "kind"}\n')


def test_the_pool_crosses_the_pipe_whole():
    pool = PromptPool((Prompt(0, "a", 3), Prompt(9, "b")), "synthetic:3", unique_prefix=True)
    assert pool_from_spec(orjson.loads(orjson.dumps(pool_spec(pool)))) == pool


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"turns": 3}, "turns = 3 is not yet supported"),
        ({"stages": "1s:4,1s:8"}, "stages = '1s:4,1s:8' is not yet supported"),
        (
            {"sweep": "concurrency=4,8", "duration_s": 60},
            "sweep = 'concurrency=4,8' is not yet supported",
        ),
        ({"shards": "lots"}, "shards = 'lots': give a number of shards, 1 to 64, or 'auto'"),
        ({"concurrency": 2}, "concurrency = 2 gives a shard no worker"),
    ],
)
def test_what_shards_cannot_do_yet_is_refused_in_words(extra, words):
    with pytest.raises(ConfigError) as e:
        load_config({"shards": 4, **extra}, environ={}, base=BASE)
    assert words in str(e.value)
    if "not yet" in words:
        assert "with --shards" in str(e.value)


def test_one_shard_is_the_default_and_refuses_nothing():
    assert load_config({"arrival": "poisson", "rate": 5}, environ={}, base=BASE).shards == 1
    assert load_config({"shards": 4, "concurrency": 8}, environ={}, base=BASE).shards == 4


def _info(index: int, **kw: object) -> ShardInfo:
    fields: dict[str, object] = {"index": index, "host": "local", "workers": 4, "requests": 10}
    return ShardInfo.model_validate(fields | {"status": "done", "exit_code": 0} | kw)


def test_a_lost_shard_is_invalid_by_name_and_a_whole_run_is_not():
    assert shard_reasons([_info(0), _info(1)], 1.0) == []
    lost = _info(1, status="lost", exit_code=-9, lost_at_s=12.34, in_flight_at_loss=4)
    (reason,) = shard_reasons([_info(0), lost], 1.0)
    assert (reason.code, reason.effect) == ("shard_lost", "invalid")
    # 0-based as the record's index, and in words no one reads as "the first of two"
    assert reason.message.startswith("shard 1 (the 2nd of 2) lost (exit -9) at 12.3 s: its 4")
    assert "(4 by its last heartbeat) are not in the journal" in reason.message


def test_a_shard_whose_loop_lagged_makes_the_run_invalid():
    (reason,) = shard_reasons([_info(0, loop_lag_p99_s=1.5), _info(1)], 1.0)
    assert reason.code == "client_overloaded" and reason.message.startswith(
        "shard 0 (the 1st of 2):"
    )


@pytest.mark.parametrize(
    ("index", "shards", "words"),
    [(0, 2, "shard 0 (the 1st of 2)"), (1, 3, "shard 1 (the 2nd of 3)"),
     (2, 3, "shard 2 (the 3rd of 3)"), (10, 12, "shard 10 (the 11th of 12)"),
     (11, 12, "shard 11 (the 12th of 12)"), (20, 64, "shard 20 (the 21st of 64)")],
)  # fmt: skip
def test_a_shard_is_named_by_its_index_and_its_place(index, shards, words):
    assert shard_name(index, shards) == words


def test_verify_counts_each_shards_requests_again(tmp_path):
    lines = [{"id": f"r/{i}", "shard": i % 2} for i in range(5)] + [{"id": "r/x"}]
    (tmp_path / "requests.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    rec = RunRecord(
        run_id="r",
        status=Status.PASSED,
        exit_code=0,
        config={},
        started_at="",
        ended_at="",
        shards=[_info(0, requests=3), _info(1, requests=3)],
    )
    assert shard_problems(tmp_path, rec) == [
        "shards[1].requests: record 3, requests.jsonl 2",
        "requests.jsonl: 1 lines of a sharded run name no shard",
    ]
    assert shard_problems(tmp_path, rec.model_copy(update={"shards": []})) == []


async def test_a_shards_stderr_line_past_the_limit_is_cut_not_fatal(capsys):
    # A line over the reader's limit raised out of the copy, the shard's follower died
    # with it and the drain waited forever for a shard whose end nobody saw.
    stream = asyncio.StreamReader(limit=64)
    stream.feed_data(b"x" * 1000 + b"\nafter it\n" + b"y" * 500)
    stream.feed_eof()
    await asyncio.wait_for(copy_shard_log("shard 1 (the 2nd of 2)", stream), 5)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("shard 1 (the 2nd of 2): a stderr line over the read limit, dropped")
    assert err[1] == "shard 1 (the 2nd of 2): after it"
    assert len(err) == 3 and "dropped" in err[2]


async def test_a_shards_stderr_flood_is_capped_in_runner_log(capsys):
    stream = asyncio.StreamReader()
    stream.feed_data(b"".join(b"warning %d\n" % i for i in range(50)))
    stream.feed_eof()
    await copy_shard_log("shard 0 (the 1st of 2)", stream, max_lines=10)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 11 and err[9] == "shard 0 (the 1st of 2): warning 9"
    assert err[10] == "shard 0 (the 1st of 2): 40 more stderr lines not copied"


def test_the_shards_socket_samples_reach_the_runs_read_tally():
    """The shards read the streams, so their socket samples are what ``client_behind``
    must judge: each report's cumulative counts add their increase to the tally the run's
    live stats read (the coordinator's own client streams nothing)."""
    from types import SimpleNamespace

    from loadgen.read_health import ReadTally
    from soak.run.shards import ShardedGenerator

    tally = ReadTally()
    client = SimpleNamespace(read_tally=tally)
    pool = PromptPool(tuple(Prompt(i, f"p{i}") for i in range(3)), "test")
    plan = LoadPlan(
        endpoints=("http://x",), concurrency=4, duration_s=1.0, max_requests=None,
        drain_timeout_s=5, barrier_timeout_s=5, request_id_prefix="run/load/chat",
    )  # fmt: skip
    sink = SimpleNamespace(on_result=lambda r: None)
    gen = ShardedGenerator(
        plan, client, pool, BodyBuilder(model="m"), sink,  # type: ignore[arg-type]
        shards=2, client_spec={"max_connections": 8},
    )  # fmt: skip
    one, two = gen.links
    gen._on_status(one, {"t": "hb", "q_samples": 40, "q_hits": 30})
    gen._on_status(two, {"t": "hb", "q_samples": 10, "q_hits": 0})
    gen._on_status(one, {"t": "hb", "q_samples": 100, "q_hits": 80})  # +60 / +50
    gen._on_status(two, {"t": "hb", "q_samples": "x"})  # malformed: adds nothing
    gen._on_status(two, {"t": "done", "q_samples": 30, "q_hits": 5})  # +20 / +5
    assert (tally.samples, tally.hits) == (130, 85)
    # The loop lag: each report's worst of its second, the p99 taken as the runner takes
    # its own (nearest rank: the 99th of 100 values, not the 100th).
    for i in range(100):
        gen._on_status(one, {"t": "hb", "lag_s": 0.001 * (i + 1)})
    gen._on_status(one, {"t": "hb", "lag_s": None})  # before the load: not a sample
    first, second = gen.shard_infos()
    assert first.loop_lag_p99_s == pytest.approx(0.099) and second.loop_lag_p99_s is None


async def test_a_shards_stderr_is_copied_display_safe_and_bounded(capsys):
    """runner.log is followed on terminals: a shard's traceback quoting a server's text
    must not carry its escape sequences, nor a megabyte on one line."""
    stream = asyncio.StreamReader()
    stream.feed_data(b"boom: \x1b]0;pwned\x07\x1b[2J tail\n" + b"z" * 100_000 + b"\n")
    stream.feed_eof()
    await copy_shard_log("shard 0 (the 1st of 2)", stream)
    first, second = capsys.readouterr().err.splitlines()
    assert "\x1b" not in first and "\\x1b]0;pwned\\x07\\x1b[2J tail" in first
    assert len(second) < 4_100
