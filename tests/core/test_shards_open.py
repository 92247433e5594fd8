"""``--shards`` with an open loop: one schedule split by arrival index; the launcher and
the clock offset a shard on another host is driven through."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from loadgen.arrivals import RateCurve, arrival_offsets
from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadPlan
from soak.run.config import ConfigError
from soak.run.config_load import load_config
from soak.run.shard_links import ShardLink
from soak.run.shard_main import ShardOpenLoop
from soak.run.shard_protocol import encode_result, message, share
from soak.run.shards import ShardedGenerator

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "traces"


class _Instant:
    """A server that answers every request at once (the schedule is what is tested)."""

    max_connections = 64

    async def warm_connection(self, url: str) -> None:
        return None

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        result.end_ns = result.sent_ns + 1
        result.status = 200
        await asyncio.sleep(0)
        return result


def _plan(k: int, shards: int, duration_s: float) -> LoadPlan:
    return LoadPlan(
        endpoints=("http://a", "http://b"),
        concurrency=share(4, shards, k),
        duration_s=duration_s,
        max_requests=None,
        drain_timeout_s=5,
        barrier_timeout_s=5,
        request_id_prefix="run/load/chat",
    )


@pytest.mark.parametrize("model", ["constant", "poisson"])
async def test_three_shards_send_the_arrivals_one_process_would(model):
    pool = PromptPool(tuple(Prompt(i, f"p{i}") for i in range(7)), "test")
    schedule = {
        "model": model, "burstiness": None, "seed": 11, "points": [(0.0, 150.0)],
        "changes": [], "max_in_flight": 30,
    }  # fmt: skip
    results: list[RequestResult] = []
    gens = [
        ShardOpenLoop(
            _plan(k, 3, 0.6),
            _Instant(),
            pool,
            BodyBuilder(model="m"),
            results.append,
            schedule,
            shards=3,
            index=k,
        )
        for k in range(3)
    ]
    assert [g.max_in_flight for g in gens] == [10, 10, 10]
    for g in gens:
        assert await g.start_workers()
    t0 = time.perf_counter_ns()  # one origin for all three (the coordinator's release)
    for g in gens:
        g.origin_ns = t0
    await asyncio.gather(*(g.run() for g in gens))
    want = list(itertools.takewhile(lambda at: at < 0.6, arrival_offsets(model, 150.0, None, 11)))
    assert 60 < len(want) < 120
    by_number = {int(r.request_id.rsplit("/", 1)[1]): r for r in results}
    assert sorted(by_number) == list(range(len(want)))  # each arrival once, none more
    for n, r in by_number.items():
        assert r.intended_ns == t0 + int(want[n] * 1e9)  # to the nanosecond
        assert r.prompt_id == pool.pick(n).id
        assert r.worker == n % 2  # its endpoint is its run number's
        assert r.sent_ns >= r.intended_ns - 1_000_000


def test_a_rate_changed_at_one_instant_gives_every_shard_one_curve():
    pool = PromptPool((Prompt(0, "p"),), "test")
    schedule = {
        "model": "poisson", "burstiness": None, "seed": 1, "points": [(0.0, 10.0)],
        "changes": [(1.5, 30.0)], "max_in_flight": 8,
    }  # fmt: skip
    gens = [
        ShardOpenLoop(
            _plan(k, 2, 5),
            _Instant(),
            pool,
            BodyBuilder(model="m"),
            lambda r: None,
            schedule,
            shards=2,
            index=k,
        )
        for k in range(2)
    ]
    for g in gens:
        g.set_rate(5.0, at_s=2.25)
    one = RateCurve([(0.0, 10.0)])
    one.set_from(1.5, 30.0)
    one.set_from(2.25, 5.0)
    assert gens[0].curve is not None and gens[1].curve is not None
    assert gens[0].curve.points == gens[1].curve.points == one.points


def test_an_open_loop_splits_with_its_steps_and_a_tiny_cap_is_refused_in_words():
    open_loop = {"shards": 2, "arrival": "poisson", "rate": 40, "duration_s": 3}
    assert load_config(open_loop, environ={}, base=BASE).shards == 2
    with pytest.raises(ConfigError, match=r"max_in_flight = 1 gives a shard no request slot"):
        load_config({**open_loop, "max_in_flight": 1}, environ={}, base=BASE)
    # Its stages and sweep are its rate curve, which every shard draws whole.
    staged = {**open_loop, "arrival": "constant", "stages": "2s:20rps,3s:20rps"}
    del staged["rate"], staged["duration_s"]
    assert load_config(staged, environ={}, base=BASE).shards == 2
    swept = {**open_loop, "sweep": "rate=2,40", "step_duration_s": 3, "settle_s": 0.5}
    del swept["rate"], swept["duration_s"]
    assert load_config(swept, environ={}, base=BASE).shards == 2
    # A closed loop's stages are not split yet.
    with pytest.raises(ConfigError, match=r"stages = '1s:4' is not yet supported"):
        load_config({"shards": 2, "stages": "1s:4"}, environ={}, base=BASE)


# -- the launcher and the clock offset (a shard on another host) -------------------------

OFFSET_NS = 5_000_000_000
"""The pretend remote shard's clock runs 5 s ahead of the coordinator's."""


class _RemoteShard:
    """A shard process stand-in on a clock ``OFFSET_NS`` ahead: it answers the spec with
    ``ready`` and the release with one result measured on its own clock, then ``done``."""

    def __init__(self) -> None:
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.stderr.feed_eof()
        self.stdin = self
        self.pid = 4242
        self.returncode: int | None = None
        self.got: list[dict[str, Any]] = []
        self._exit = asyncio.Event()

    def _say(self, kind: str, **body: Any) -> None:
        self.stdout.feed_data(message(kind, **body))

    def write(self, data: bytes) -> None:
        for line in data.splitlines():
            msg = orjson.loads(line)
            self.got.append(msg)
            if msg["t"] == "spec":
                workers = msg["plan"]["concurrency"]
                now = time.perf_counter_ns() + OFFSET_NS
                self._say("ready", clock_ns=now, workers_started=workers, failures={})
            elif msg["t"] == "release":
                t0 = msg["t0"]  # on this shard's clock
                self._say("released", ns=t0 + 1_000)
                r = RequestResult(
                    request_id=f"run/load/chat/{msg['t0'] % 2}", worker=0, prompt_id=0,
                    sent_ns=t0 + 2_000, first_byte_ns=t0 + 3_000, first_token_ns=t0 + 3_000,
                    end_ns=t0 + 9_000, status=200, intended_ns=t0,
                )  # fmt: skip
                self.stdout.feed_data(encode_result(r, 0))
                self._say("done", released_ns=t0 + 1_000, requested=1)
                self.stdout.feed_eof()
                self.returncode = 0
                self._exit.set()

    async def wait(self) -> int:
        await self._exit.wait()
        return 0

    def kill(self) -> None:
        self._exit.set()


async def test_a_launched_shard_on_another_clock_is_shifted_both_ways():
    started: list[_RemoteShard] = []

    async def launcher(link: ShardLink, env: Mapping[str, str]) -> _RemoteShard:
        link.clock_offset_ns = OFFSET_NS  # measured by the transport before the spec
        started.append(_RemoteShard())
        return started[-1]

    journaled: list[RequestResult] = []
    events = SimpleNamespace(emit=lambda *a, **kw: None)
    sink = SimpleNamespace(
        on_result=lambda r, shard=None: journaled.append(r),
        state=SimpleNamespace(events=events, internal_errors=[]),
    )
    plan = LoadPlan(
        endpoints=("http://x",), concurrency=4, duration_s=None, max_requests=None,
        drain_timeout_s=5, barrier_timeout_s=5, request_id_prefix="run/load/chat",
    )  # fmt: skip
    gen = ShardedGenerator(
        plan, SimpleNamespace(), PromptPool((Prompt(0, "p"),), "test"),
        BodyBuilder(model="m"), sink, shards=2,  # type: ignore[arg-type]
        client_spec={"max_connections": 8}, launcher=launcher,
    )  # fmt: skip
    # Its clock reads 5 s ahead: only the offset keeps the one-clock check from failing.
    assert await gen.start_workers()
    await asyncio.wait_for(gen.run(), 5)
    t0 = gen.state.barrier_released_ns
    assert t0 is not None and len(started) == 2 and len(journaled) == 2
    for shard in started:
        release = next(m for m in shard.got if m["t"] == "release")
        assert release["t0"] == t0 + OFFSET_NS  # sent: on the shard's clock
    for r in journaled:  # received: back on ours
        assert r.intended_ns == t0
        assert (r.sent_ns, r.first_byte_ns, r.end_ns) == (t0 + 2_000, t0 + 3_000, t0 + 9_000)
    assert [s.release_offset_s for s in gen.shard_infos()] == [1e-06, 1e-06]


async def test_a_calibrated_trace_pool_crosses_the_pipe_whole():
    from dataclasses import replace

    from loadgen.trace_source import TraceSource, calibrate
    from loadgen.traces import load_trace
    from soak.run.shard_trace import trace_pool_from_spec, trace_spec

    trace = load_trace(SAMPLES / "mooncake_sample.jsonl")
    pool = await calibrate(trace, time_scale=4, seed=3, count_text=None, count_prompt=None)
    pool = replace(pool, tokens_per_word=1.3, fixed_tokens=7.5, calibrated=True,
                   checks=((100, 101),))  # fmt: skip
    again = trace_pool_from_spec(orjson.loads(orjson.dumps(trace_spec(pool))))
    assert again == pool and again.sha256 == pool.sha256
    bodies = BodyBuilder(model="m")
    one, other = TraceSource(pool, bodies), TraceSource(again, bodies)
    for n in (0, 1, len(trace.arrivals) - 1):  # the shard writes arrival n's prompt as we do
        assert one.request(n) == other.request(n)


# -- the coordinator of an open loop: its live rate changes and its in-flight peak ---------


class _HeldShard:
    """A shard process stand-in that answers the spec with ``ready`` and then says only
    what the test feeds it (results, reports, ``done``): the coordinator's view of it."""

    def __init__(self) -> None:
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.stderr.feed_eof()
        self.stdin = self
        self.pid = 4343
        self.returncode: int | None = None
        self.got: list[dict[str, Any]] = []
        self._exit = asyncio.Event()

    def say(self, kind: str, **body: Any) -> None:
        self.stdout.feed_data(message(kind, **body))

    def result(self, n: int, sent_ns: int, end_ns: int) -> None:
        r = RequestResult(
            request_id=f"run/load/chat/{n}", worker=0, prompt_id=0, sent_ns=sent_ns,
            first_byte_ns=sent_ns + 1, first_token_ns=sent_ns + 1, end_ns=end_ns, status=200,
            intended_ns=sent_ns,
        )  # fmt: skip
        self.stdout.feed_data(encode_result(r, 0))

    def finish(self) -> None:
        self.say("done", released_ns=None, requested=1, in_flight_peak=2)
        self.stdout.feed_eof()
        self.returncode = 0
        self._exit.set()

    def write(self, data: bytes) -> None:
        for line in data.splitlines():
            msg = orjson.loads(line)
            self.got.append(msg)
            if msg["t"] == "spec":
                self.say("ready", clock_ns=time.perf_counter_ns(), workers_started=2, failures={})

    async def wait(self) -> int:
        await self._exit.wait()
        return 0

    def kill(self) -> None:
        self.finish()


async def _open_coordinator() -> tuple[Any, list[_HeldShard], list[RequestResult]]:
    from soak.run.shards_open import ShardedOpenLoop

    shards: list[_HeldShard] = []

    async def launcher(link: ShardLink, env: Mapping[str, str]) -> _HeldShard:
        shards.append(_HeldShard())
        return shards[-1]

    journaled: list[RequestResult] = []
    sink = SimpleNamespace(
        on_result=lambda r, shard=None: journaled.append(r),
        state=SimpleNamespace(events=SimpleNamespace(emit=lambda *a, **kw: None),
                              internal_errors=[]),
    )  # fmt: skip
    plan = LoadPlan(
        endpoints=("http://x",), concurrency=4, duration_s=None, max_requests=None,
        drain_timeout_s=5, barrier_timeout_s=5, request_id_prefix="run/load/chat",
    )  # fmt: skip
    schedule = {"model": "constant", "burstiness": None, "seed": 1, "points": [(0.0, 10.0)],
                "max_in_flight": 8}  # fmt: skip
    gen = ShardedOpenLoop(
        plan, SimpleNamespace(), PromptPool((Prompt(0, "p"),), "test"),
        BodyBuilder(model="m"), sink, 2, {"max_connections": 8}, schedule,  # type: ignore[arg-type]
        launcher=launcher,
    )  # fmt: skip
    assert await gen.start_workers()
    return gen, shards, journaled


async def test_a_live_rate_change_holds_in_every_shard_from_one_instant_just_ahead():
    from soak.run.shards_open import RATE_LEAD_S

    gen, shards, _ = await _open_coordinator()
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0.2)
    made_s = gen._now_s()
    gen.set_rate(30.0)
    sent = [next(m for m in s.got if m["t"] == "rate") for s in shards]
    # One instant for both shards, far enough ahead that the pipe delivers it first: each
    # re-times the same arrivals, as one process would at that instant.
    assert sent[0] == sent[1] and sent[0]["rate"] == 30.0
    at = sent[0]["at_s"]
    assert made_s + RATE_LEAD_S <= at < made_s + RATE_LEAD_S + 0.05
    assert gen.curve.rate_at(at - 1e-3) == 10.0 and gen.curve.rate_at(at) == 30.0
    for s in shards:
        s.finish()
    await asyncio.wait_for(run, 5)


async def test_the_in_flight_peak_is_the_merged_requests_not_the_shards_sum():
    gen, (one, two), journaled = await _open_coordinator()
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0)
    t0 = time.perf_counter_ns()
    ms = 1_000_000
    # Each shard had two requests out at once — but never while the other did: one
    # process would have seen a peak of 2, and the shards' peaks sum to 4.
    one.result(0, t0, t0 + 10 * ms)
    one.result(2, t0 + 1 * ms, t0 + 11 * ms)
    two.result(1, t0 + 20 * ms, t0 + 30 * ms)
    two.result(3, t0 + 21 * ms, t0 + 31 * ms)
    # Reports: shard one has a request still out since t0 + 40 ms, shard two since 25 ms
    # (later lines may still overlap there, so nothing past 25 ms is swept yet).
    one.say("hb", in_flight=1, in_flight_peak=2, settled_ns=t0 + 40 * ms)
    two.say("hb", in_flight=1, in_flight_peak=2, settled_ns=t0 + 25 * ms)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if len(journaled) == 4 and gen.links[1].beat:
            break
    assert gen.state.in_flight_peak == 2
    one.result(4, t0 + 40 * ms, t0 + 60 * ms)
    two.result(5, t0 + 45 * ms, t0 + 50 * ms)
    two.result(7, t0 + 46 * ms, t0 + 55 * ms)  # three out at once, 46–50 ms
    one.finish()
    two.finish()
    await asyncio.wait_for(run, 5)
    assert len(journaled) == 7
    assert gen.state.in_flight_peak == 3


def test_the_merged_peak_swept_in_pieces_is_the_whole_journals():
    import random

    from soak.run.shard_peak import MergedPeak

    rng = random.Random(5)
    starts = (rng.randint(0, 5_000) for _ in range(600))
    spans = [(a, a + rng.randint(1, 400)) for a in starts]
    moments = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    level = want = 0
    for _, step in moments:  # the journal's sweep, as the e2e tests do it
        level += step
        want = max(want, level)
    peak, pending = MergedPeak(), sorted(spans, key=lambda s: s[1])
    for now in range(0, 6_000, 97):  # a report every 97 ns: what ended by now is in
        while pending and pending[0][1] <= now:
            peak.add(*pending.pop(0))
        # Settled: the earliest send still out, else now.
        peak.settle(min((a for a, _ in pending if a < now), default=now))
        assert peak.peak <= want
    for span in pending:
        peak.add(*span)
    assert peak.settle(float("inf")) == want and want > 3


def test_auto_shards_an_open_loop_by_its_cap_not_its_concurrency():
    from soak.run.config_shards import resolve_auto

    far = {"endpoints": ["http://10.1.2.3:8000"], "model": "tiny"}  # the server elsewhere
    # 1,000 requests in flight need 4 shards of 256; the (warming) concurrency of 2 is
    # not what streams.
    cfg = load_config(
        {"shards": "auto", "arrival": "poisson", "rate": 500, "max_in_flight": 1000,
         "concurrency": 2, "duration_s": 3},
        environ={}, base=far,
    )  # fmt: skip
    cfg.shards_auto = "auto"
    resolve_auto(cfg, cores=16)
    assert (cfg.shards, cfg.shards_auto) == (
        4, "auto: 4 shards (15 spare cores of 16, max_in_flight 1000 needs 4)"
    )  # fmt: skip
    # Never more shards than the cap has slots, whatever the cores.
    small = load_config(
        {"shards": "auto", "arrival": "constant", "rate": 5, "max_in_flight": 2, "duration_s": 3},
        environ={}, base=far,
    )  # fmt: skip
    small.shards_auto = "auto"
    resolve_auto(small, cores=64)
    assert small.shards == 1 and "max_in_flight 2 needs 1" in str(small.shards_auto)
    # No cap given: the rate's default cap, named as such.
    rated = load_config(
        {"shards": "auto", "arrival": "constant", "rate": 400, "duration_s": 3},
        environ={}, base=far,
    )  # fmt: skip
    rated.shards_auto = "auto"
    resolve_auto(rated, cores=64)
    assert "(the default for 400 requests/s) needs" in str(rated.shards_auto)
    assert rated.shards > 1
