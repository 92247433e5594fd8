"""The endurance scenarios of the simulated engine, seen the way a client sees them.

Each test starts ``python -m simengine`` as its own process on loopback, drives a small
closed-loop load with soaktop-shaped request ids (``<run>/load/chat/<n>``: the first one
starts the scenario clock), and reads what a soak would read: the process's RSS (psutil
on the engine's pid), ``/metrics`` and the DCGM exporter, TTFT and the gaps between
stream chunks, and the text of every answer. Onsets are 1 s and the curves run faster
(``--scenario-speed``) so that each test takes seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from simengine import SimConfig
from simengine.endurance import CURVES, WHITESPACE, Endurance
from simengine.faults import ENDURANCE_SCENARIOS, SCENARIO_ONSET_S, SCENARIOS, FaultBook
from tests.simengine.sim_helpers import scrape, value

MB = 1 << 20


@dataclass
class Sim:
    """A running engine process: its pid and the URLs of replica 0."""

    proc: subprocess.Popen[bytes]
    url: str
    dcgm_url: str


def _spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
    # Popen, not asyncio's subprocess: the engine must outlive no event loop of ours.
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@asynccontextmanager
async def engine(tmp_path: Path, *args: str) -> AsyncIterator[Sim]:
    """``python -m simengine`` with one replica and one GPU, stopped by SIGTERM."""
    ready = tmp_path / "ready.json"
    cmd = [sys.executable, "-m", "simengine", "--replicas", "1", "--gpus-per-replica", "1",
           "--log-dir", str(tmp_path / "logs"), "--ready-file", str(ready), *args]  # fmt: skip
    proc = _spawn(cmd)
    try:
        deadline = time.monotonic() + 15
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"simengine did not get ready (rc={proc.poll()})")
            await asyncio.sleep(0.02)
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid  # the pid a soak watches is the one that serves
        rep = info["replicas"][0]
        yield Sim(proc, rep["url"], rep["dcgm_url"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Answer:
    """One streamed request as the client saw it (times from the load's start)."""

    start: float
    end: float
    status: int
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    finish: str | None = None
    completion_tokens: int | None = None

    @property
    def text(self) -> str:
        """The visible output."""
        return "".join(self.pieces)


async def ask(s: aiohttp.ClientSession, url: str, rid: str, t0: float, **body: Any) -> Answer:
    """One streamed chat request, timing every token chunk."""
    payload = {"model": "tiny-sim", "stream": True, "stream_options": {"include_usage": True},
               "messages": [{"role": "user", "content": "Tell me a story."}], **body}  # fmt: skip
    start = time.monotonic()
    ans = Answer(start - t0, 0.0, 0)
    last = start
    async with s.post(url + "/v1/chat/completions", json=payload,
                      headers={"X-Request-Id": rid}) as r:  # fmt: skip
        ans.status = r.status
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            now = time.monotonic()
            chunk = json.loads(line[6:])
            if chunk.get("usage") and not chunk.get("choices"):
                ans.completion_tokens = chunk["usage"]["completion_tokens"]
                continue
            choice = chunk["choices"][0]
            text = (choice.get("delta") or {}).get("content")
            if text:
                if ans.ttft is None:
                    ans.ttft = now - start
                else:
                    ans.gaps.append(now - last)
                last = now
                ans.pieces.append(text)
            ans.finish = choice.get("finish_reason") or ans.finish
    ans.end = time.monotonic() - t0
    return ans


async def load(url: str, seconds: float, workers: int, **body: Any) -> list[Answer]:
    """A closed loop of ``workers`` streams for ``seconds``, every answer kept."""
    out: list[Answer] = []
    t0 = time.monotonic()
    counter = iter(range(10**9))

    async def worker(s: aiohttp.ClientSession) -> None:
        while time.monotonic() - t0 < seconds:
            out.append(await ask(s, url, f"t/load/chat/{next(counter)}", t0, **body))

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        await asyncio.gather(*(worker(s) for _ in range(workers)))
    return out


async def sample_while(task: asyncio.Task[Any], every_s: float, probe: Any) -> list[Any]:
    """Call ``probe()`` every ``every_s`` until ``task`` is done."""
    samples = []
    while not task.done():
        samples.append(await probe())
        await asyncio.sleep(every_s)
    return samples


def rss_mb(pid: int) -> float:
    """The engine process's resident memory."""
    return float(psutil.Process(pid).memory_info().rss) / MB


def windows(answers: list[Answer], width_s: float, end_s: float) -> list[list[Answer]]:
    """Answers by the window their request ended in."""
    n = int(end_s // width_s)
    out: list[list[Answer]] = [[] for _ in range(n)]
    for a in answers:
        i = int(a.end // width_s)
        if i < n:
            out[i].append(a)
    return out


def median_gap(answers: list[Answer]) -> float:
    """The median gap between token chunks (robust to a client stalled by the machine)."""
    return statistics.median(g for a in answers for g in a.gaps)


def degenerate(text: str) -> str | None:
    """How an answer is broken, judged from its text only (None: it reads normally)."""
    words = text.split()
    if len(words) <= 2 and len(text) < 24:
        return "tiny"
    if text.count(" ") + text.count("\n") > 0.5 * len(text):
        return "whitespace"
    grams = Counter(zip(words, words[1:], words[2:], strict=False))
    if len(words) >= 8 and grams.most_common(1)[0][1] * 3 > 0.5 * len(words):
        return "repetition"
    return None


# -- the scenarios, end to end -------------------------------------------------------------
async def test_slow_leak_kv_rss_fb_and_ttft_creep_and_never_return(tmp_path: Path) -> None:
    args = ("--scenario", "slow-leak", "--scenario-at", "1", "--scenario-speed", "5",
            "--decode-ms-base", "5", "--decode-ms-per-seq", "0", "--noise")  # fmt: skip
    async with engine(tmp_path, *args) as sim, aiohttp.ClientSession() as s:

        async def probe() -> tuple[float, float, float, float]:
            m, d = await scrape(s, sim.url + "/metrics"), await scrape(s, sim.dcgm_url)
            kv = value(m, "vllm:kv_cache_usage_perc")
            return time.monotonic(), kv, value(d, "DCGM_FI_DEV_FB_USED"), rss_mb(sim.proc.pid)

        before = await probe()
        t0 = time.monotonic()
        task = asyncio.create_task(load(sim.url, 8.0, 4, max_tokens=24))
        samples = await sample_while(task, 0.5, probe)
        answers = task.result()
        await asyncio.sleep(0.5)
        after = await probe()  # the load is over: what leaked stays leaked
    assert answers and all(a.status == 200 for a in answers)
    kv = [x[1] for x in samples]
    fb = [x[2] for x in samples]
    # 0.4 %/s × 5 over ~7 s after the onset: about 14 % of the cache, never given back.
    assert kv[-1] - max(kv[:2]) > 0.08, kv
    assert after[1] > 0.08 and after[1] >= kv[-1] - 0.01, (after, kv[-1])
    assert fb[-1] - fb[0] > 0.08 * 104000, fb
    # 4 MB/s × 5 of real, touched memory: ~140 MB on top of the noise's sawtooth (< 48 MB).
    assert after[3] - before[3] > 80, (before[3], after[3])
    # TTFT: +5 ms × 5 per second of the leak; the first second has none of it.
    early = [a.ttft for a in answers if a.start < 0.8 and a.ttft is not None]
    late = [a.ttft for a in answers if a.start > 6.0 and a.ttft is not None]
    assert early and late and statistics.median(late) > statistics.median(early) + 0.08
    assert max(x[0] for x in samples) - t0 < 12


async def test_throughput_decay_slows_decode_and_output_tok_s_falls(tmp_path: Path) -> None:
    args = ("--scenario", "throughput-decay", "--scenario-at", "1", "--scenario-speed", "10",
            "--decode-ms-base", "10", "--decode-ms-per-seq", "0")  # fmt: skip
    async with engine(tmp_path, *args) as sim:
        answers = await load(sim.url, 7.0, 4, max_tokens=16)
    assert all(a.status == 200 and a.completion_tokens == len(a.pieces) for a in answers)
    per_s = [sum(len(a.pieces) for a in w) for w in windows(answers, 1.0, 7.0)]
    itl = [median_gap(w) for w in windows(answers, 1.0, 7.0)]
    # 1.5 %/s × 10: the step is ~1.8× as long 5.5 s after the onset, every window slower
    # than the one before; output tok/s falls with it (window 0 holds the start-up).
    assert all(b >= a * 0.97 for a, b in itertools.pairwise(itl)), itl
    assert itl[-1] > 1.5 * itl[0], itl
    assert statistics.mean(per_s[-2:]) < 0.75 * max(per_s[:2]), per_s


async def test_garbage_after_degenerate_answers_with_http_200(tmp_path: Path) -> None:
    args = ("--scenario", "garbage-after", "--scenario-at", "1", "--decode-ms-base", "1",
            "--decode-ms-per-seq", "0")  # fmt: skip
    async with engine(tmp_path, *args) as sim:
        answers = await load(sim.url, 3.0, 4, max_tokens=48)
        async with aiohttp.ClientSession() as s:  # structured answers keep their grammar
            schema = {"type": "object", "properties": {"a": {"type": "integer"}},
                      "required": ["a"]}  # fmt: skip
            fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
            body = {"model": "tiny-sim", "response_format": fmt,
                    "messages": [{"role": "user", "content": "json"}]}  # fmt: skip
            async with s.post(sim.url + "/v1/chat/completions", json=body,
                              headers={"X-Request-Id": "t/load/json/1"}) as r:  # fmt: skip
                structured = await r.json()
    assert answers and all(a.status == 200 for a in answers)
    assert all(a.completion_tokens == len(a.pieces) for a in answers)  # usage stays honest
    before = [a for a in answers if a.start < 0.9]
    after = [a for a in answers if a.start > 1.1]
    assert before and all(degenerate(a.text) is None for a in before)
    kinds = Counter(degenerate(a.text) for a in after)
    assert kinds[None] < 0.3 * len(after), kinds
    assert {"tiny", "whitespace", "repetition"} <= set(kinds), kinds
    assert all(a.finish == "stop" for a in after if degenerate(a.text) == "tiny")
    assert isinstance(json.loads(structured["choices"][0]["message"]["content"])["a"], int)


async def test_healthy_noise_jitters_and_saws_without_a_trend(tmp_path: Path) -> None:
    args = ("--scenario", "healthy", "--noise", "--scenario-speed", "4", "--seed", "7",
            "--decode-ms-base", "10", "--decode-ms-per-seq", "0")  # fmt: skip
    async with engine(tmp_path, *args) as sim, aiohttp.ClientSession() as s:
        base = rss_mb(sim.proc.pid)

        async def probe() -> tuple[float, float]:
            m = await scrape(s, sim.url + "/metrics")
            return value(m, "vllm:kv_cache_usage_perc"), rss_mb(sim.proc.pid)

        task = asyncio.create_task(load(sim.url, 10.0, 4, max_tokens=16))
        samples = await sample_while(task, 0.25, probe)
        answers = task.result()
        await asyncio.sleep(0.3)
        idle_kv = (await probe())[0]
    rss = [x[1] for x in samples]
    # The sawtooth climbs 8 MB/s to a 24-48 MB peak, then everything goes back at once.
    drops = [a - b for a, b in itertools.pairwise(rss)]
    assert max(rss) - base > 15 and max(drops) > 15, rss
    assert max(rss) - base < 48 + 40, (base, max(rss))
    # ITL and TTFT jitter (lognormal σ 0.1 on every step) but their windows hold still:
    # the window medians (what a soak's p50 sees) stay within a few percent of each other.
    gaps = [g for a in answers for g in a.gaps]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) > 0.04
    itl = [median_gap(w) for w in windows(answers, 1.0, 10.0)]
    ttft = [statistics.median(a.ttft or 0.0 for a in w) for w in windows(answers, 1.0, 10.0)]
    assert max(itl) < 1.1 * min(itl), itl
    assert max(ttft[1:]) < 1.6 * min(ttft[1:]), ttft
    # KV usage follows the load: up while requests run, back to nothing when they end.
    assert max(x[0] for x in samples) > 0 and idle_kv == 0.0


# -- the curves themselves -----------------------------------------------------------------
def _clocked(scenario: str, elapsed_s: float, **kw: Any) -> Endurance:
    """An Endurance whose load began ``elapsed_s`` ago (the fault book's real clock)."""
    book = FaultBook([], 1, keep_clock=True)
    book.load_started_at = time.monotonic() - elapsed_s
    return Endurance(scenario, book, onset_s=kw.pop("onset_s", 30.0), **kw)


def test_curves_start_at_the_onset_and_stop_at_their_caps() -> None:
    early, mid, late = (_clocked("slow-leak", t) for t in (29.0, 80.0, 1e6))
    assert early.kv_leak_share() == 0 and early.prefill_hold_s() == 0
    assert mid.kv_leak_share() == pytest.approx(0.004 * 50, rel=0.01)
    assert mid.prefill_hold_s() == pytest.approx(0.005 * 50, rel=0.01)
    assert late.kv_leak_share() == CURVES.kv_leak_max
    assert late.prefill_hold_s() == CURVES.ttft_hold_max_ms / 1000
    decay = _clocked("throughput-decay", 1e6, onset_s=40.0)
    assert decay.step_factor() == CURVES.step_growth_max
    assert _clocked("throughput-decay", 60.0, onset_s=40.0).step_factor() == pytest.approx(1.3)
    assert _clocked("healthy", 1e6).step_factor() == 1.0  # no noise: a steady engine


def test_the_leak_holds_real_memory_up_to_its_cap_and_gives_it_back_at_exit() -> None:
    leak = _clocked("slow-leak", 1e6, curves=type(CURVES)(rss_leak_max_mb=32.0))
    rss0 = float(psutil.Process().memory_info().rss) / MB
    leak.memory_tick()
    leak.memory_tick()
    assert leak.held_mb == 32.0 and leak.fb_leak_mib() == 32.0
    assert float(psutil.Process().memory_info().rss) / MB - rss0 > 28
    leak.release()
    assert leak.held_mb == 0.0


def test_the_seed_draws_the_noise() -> None:
    def factors(seed: int) -> list[float]:
        e = _clocked("healthy", 1.0, noise=True, seed=seed)
        return [e.step_factor() for _ in range(400)]

    a, b = factors(1), factors(2)
    assert a == factors(1) and a != b
    for f in (a, b):
        assert 0.97 < statistics.mean(f) < 1.04 and 0.07 < statistics.pstdev(f) < 0.13


def test_garbage_keeps_usage_honest_and_spares_answers_before_the_onset() -> None:
    from simengine.textgen import OutputRequest

    req = OutputRequest(max_tokens=40)
    assert _clocked("garbage-after", 39.0, onset_s=40.0).garble(req, random.Random(1)) is None
    after = _clocked("garbage-after", 41.0, onset_s=40.0)
    plans = [after.garble(req, random.Random(i)) for i in range(400)]
    kept = sum(p is None for p in plans)
    assert 0.04 < kept / 400 < 0.18  # 90 % degenerate
    for got in plans:
        if got is None:
            continue
        plan, idx = got
        assert len(plan.kinds) == len(plan.texts) and 1 <= len(plan) <= 40
        assert plan.finish == ("stop" if len(plan) <= 2 else "length")
        assert idx is None or len(idx) == len(plan)
        if idx is None:
            assert set(plan.texts[-5:]) <= set(WHITESPACE)
    eos_ignored = OutputRequest(max_tokens=40, ignore_eos=True)
    assert all(
        p is None or p[0].finish == "length"
        for p in (after.garble(eos_ignored, random.Random(i)) for i in range(100))
    )


def test_onsets_and_the_demo_agree_with_the_engine() -> None:
    from soak.cli import demo

    assert SimConfig(scenario="slow-leak").onset_s == 30.0
    assert SimConfig(scenario="throughput-decay").onset_s == 30.0
    assert SimConfig(scenario="garbage-after", scenario_at=5).onset_s == 5.0
    assert SimConfig(scenario="xid-mid-run").onset_s == 30.0  # as before
    assert set(demo.SCENARIOS) == set(SCENARIOS)
    assert {k: SCENARIO_ONSET_S[k] for k in ENDURANCE_SCENARIOS} == demo.SCENARIO_ONSET_S
    assert demo.scenario_onset("slow-leak", 120, None) == 30.0
    assert demo.scenario_onset("garbage-after", 120, None) == 40.0
    assert demo.scenario_onset("garbage-after", 60, None) == 30.0  # half of a short load
    assert demo.scenario_onset("xid-mid-run", 120, None) == 60.0  # as before
    assert demo.scenario_onset("slow-leak", 120, 5.0) == 5.0


def test_the_demo_engine_serves_from_the_pid_it_reports(tmp_path: Path) -> None:
    from soak.cli.demo import simulated_engine

    with simulated_engine(replicas=1, gpus_per_replica=1, scenario="slow-leak", noise=True,
                          seed=3) as sim:  # fmt: skip
        assert sim.pid == sim.proc.pid
        cmdline = psutil.Process(sim.pid).cmdline()
        assert "simengine" in cmdline and "--noise" in cmdline
        assert cmdline[cmdline.index("--seed") + 1] == "3"
