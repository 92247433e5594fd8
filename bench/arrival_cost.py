"""What does the open-loop scheduler cost the client? Poisson arrivals vs the closed loop.

Prints, side by side from one run, the client's CPU µs per request for the closed loop
(``loadgen.workers.LoadGenerator``, ``--concurrency C``) and for open-loop schedules
(``loadgen.open_loop.OpenLoopGenerator``) at the rate the closed loop achieved — the same
throughput against the same server — and takes the difference apart. Target (issue 16
§5): the scheduler costs at most a few µs per request more.

The open-loop schedules:
- ``aligned``: the closed loop's own traffic shape, driven by the scheduler — bursts of C
  arrivals every C/rate seconds, as the closed loop's C workers send when their C
  answers end together: the scheduler's code on the network path, with the traffic the
  closed loop makes;
- ``constant`` and ``poisson``: arrivals spread out in time. Each one that comes alone
  wakes the client's loop for itself, and its response head comes back alone (another
  wake-up), where the closed loop handles C of each per wake-up. poisson − aligned is
  the traffic's shape, not the scheduler: the bench prints the wake-ups per request
  (voluntary context switches of the driver process ÷ requests) beside the CPU;
- ``scheduler only`` (no network, no sleeping): the generators against an in-process
  client that answers at once, every arrival due at once — the per-request Python work
  of the scheduler (a task, the cap, the bookkeeping) against the closed loop's worker.

Method
- Server: ``bench/fast_server.py`` (paced: one token per stream every ``--interval-ms``),
  its own process, shared by every run.
- Each client run is its own process (``--driver``): the product's generator, the
  product's StreamClient and event loop (uvloop when installed), a fixed prompt; CPU is the
  driver process's own user+sys (``time.process_time``) from the barrier's release to the
  end of the drain, so imports and connection set-up are left out for both; µs/request =
  that CPU ÷ completed requests.
- The closed loop runs first to find the throughput; then the modes alternate (closed,
  aligned, constant, poisson, closed, ...) ``--reps`` times and the medians are printed,
  so drift of the machine's load hits all alike.

Usage:  .venv/bin/python bench/arrival_cost.py [--concurrency 16] [--duration 10] [--reps 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

OPEN_MODES = ("aligned", "constant", "poisson")
MICRO_REQUESTS = 20_000


def _aligned(rate: float, burst: int) -> Iterator[float]:
    """Bursts of ``burst`` arrivals every ``burst / rate`` s: the closed loop's shape."""
    period = burst / rate
    for k in itertools.count():
        yield from itertools.repeat(k * period, burst)


def _offsets(mode: str, rate: float, burst: int) -> Iterator[float]:
    from loadgen.arrivals import arrival_offsets

    if mode == "aligned":
        return _aligned(rate, burst)
    return arrival_offsets("constant" if mode == "constant" else "poisson", rate, None, 0)


async def _drive(args: argparse.Namespace) -> dict[str, float]:
    from loadgen.client import StreamClient
    from loadgen.envelope import RequestResult
    from loadgen.open_loop import OpenLoopGenerator
    from loadgen.prompts import BodyBuilder, Prompt, PromptPool
    from loadgen.workers import LoadGenerator, LoadPlan

    done: list[RequestResult] = []
    pool = PromptPool(prompts=(Prompt(id=0, text="hello " * 32),), source="bench")
    bodies = BodyBuilder(
        model="tiny", api="completions", max_tokens=args.output_len, ignore_eos=True
    )
    closed = args.driver == "closed"
    conns = args.concurrency if closed else args.max_in_flight
    plan = LoadPlan(
        endpoints=(args.url,),
        concurrency=args.concurrency if closed else min(conns, 64),
        duration_s=args.duration,
        max_requests=None,
        drain_timeout_s=30.0,
        barrier_timeout_s=30.0,
        request_id_prefix="bench/load/completions",
    )
    async with StreamClient(max_connections=conns + 16, ignore_eos=True) as client:
        gen: LoadGenerator
        if closed:
            gen = LoadGenerator(plan, client, pool, bodies, done.append)
        else:
            offsets = _offsets(args.driver, args.rate, args.concurrency)
            gen = OpenLoopGenerator(
                plan, client, pool, bodies, done.append, offsets, args.max_in_flight
            )
        assert await gen.start_workers()
        cpu0, t0 = time.process_time(), time.perf_counter()
        switches0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        await gen.run()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches0
    ok = sum(1 for r in done if r.ok)
    late = sorted((r.sent_ns - r.intended_ns) / 1e6 for r in done if r.intended_ns is not None)
    return {
        "ok": ok,
        "failed": len(done) - ok,
        "req_per_s": ok / args.duration,
        "cpu_us_per_request": cpu / ok * 1e6 if ok else float("nan"),
        "cpu_cores": cpu / wall,
        "wakeups_per_request": switches / ok if ok else float("nan"),
        "lateness_p99_ms": late[int(0.99 * (len(late) - 1))] if late else float("nan"),
        "held_by_cap": float(getattr(gen.state, "held_by_cap", 0)),
    }


class _InstantClient:
    """Answers every request at once, in-process: what is left is the generator's work."""

    async def warm_connection(self, url: str) -> None:
        return None

    async def stream_into(self, result: Any, url: str, body: bytes) -> Any:
        result.first_token_ns = result.sent_ns
        return result


async def _micro_one(kind: str) -> float:
    from loadgen.open_loop import OpenLoopGenerator
    from loadgen.prompts import BodyBuilder, Prompt, PromptPool
    from loadgen.workers import LoadGenerator, LoadPlan

    pool = PromptPool(prompts=(Prompt(id=0, text="hello " * 32),), source="bench")
    bodies = BodyBuilder(model="tiny", api="completions", max_tokens=16, ignore_eos=True)
    plan = LoadPlan(
        endpoints=("http://127.0.0.1:9",),
        concurrency=16,
        duration_s=None,
        max_requests=MICRO_REQUESTS,
        drain_timeout_s=30.0,
        barrier_timeout_s=30.0,
        request_id_prefix="bench/load/completions",
    )
    done: list[Any] = []
    client = _InstantClient()
    gen: LoadGenerator
    if kind == "closed":
        gen = LoadGenerator(plan, client, pool, bodies, done.append)
    else:
        zeros = itertools.repeat(0.0)
        gen = OpenLoopGenerator(plan, client, pool, bodies, done.append, zeros, 1000)
    assert await gen.start_workers()
    cpu0 = time.process_time()
    await gen.run()
    cpu = time.process_time() - cpu0
    assert len(done) == MICRO_REQUESTS, len(done)
    return cpu / MICRO_REQUESTS * 1e6


def _micro() -> dict[str, float]:
    from loadgen import eventloop

    runs: dict[str, list[float]] = {"closed": [], "open": []}
    for _ in range(5):
        for kind, us in runs.items():
            us.append(eventloop.run(_micro_one(kind)))
    return {f"{kind}_us": statistics.median(us) for kind, us in runs.items()}


def _run_driver(args: argparse.Namespace, driver: str, rate: float | None) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--driver", driver, "--url", args.url or ""]
    cmd += ["--concurrency", str(args.concurrency), "--duration", str(args.duration)]
    cmd += ["--output-len", str(args.output_len), "--max-in-flight", str(args.max_in_flight)]
    if rate is not None:
        cmd += ["--rate", f"{rate:.3f}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 120)
    if out.returncode != 0:
        raise RuntimeError(f"{driver} driver failed:\n{out.stdout}\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _bench(args: argparse.Namespace) -> None:
    server = subprocess.Popen(
        [
            *(sys.executable, str(REPO / "bench" / "fast_server.py"), "--port", "0"),
            *("--token-interval-ms", f"{args.interval_ms:g}"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    try:
        line = server.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"fast_server did not start: {line!r}")
        args.url = f"http://127.0.0.1:{int(line.split()[1])}"
        rate = _run_driver(args, "closed", None)["req_per_s"]  # the throughput to match
        rows: dict[str, list[dict[str, float]]] = {m: [] for m in ("closed", *OPEN_MODES)}
        for _ in range(args.reps):
            for mode, runs in rows.items():
                runs.append(_run_driver(args, mode, None if mode == "closed" else rate))
    finally:
        server.terminate()
        server.wait(10)
    _print(args, rate, rows, _run_driver(args, "micro", None))


def _print(
    args: argparse.Namespace,
    rate: float,
    rows: dict[str, list[dict[str, float]]],
    micro: dict[str, float],
) -> None:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[mode])

    print(
        f"arrival_cost: fast_server paced {args.interval_ms:g} ms/token, {args.output_len} "
        f"tokens/request, {args.duration:g} s per run, {args.reps} alternating reps (median)"
    )
    print(
        f"  closed loop at concurrency {args.concurrency}; open loop at {rate:.1f} req/s "
        f"(aligned: bursts of {args.concurrency}, the closed loop's shape)"
    )
    head = f"{'CPU µs/req':>11} {'wake-ups/req':>13} {'cores':>6} {'late p99 ms':>12}"
    print(f"  {'mode':<9} {'req/s':>8} {head}")
    for mode in rows:
        print(
            f"  {mode:<9} {med(mode, 'req_per_s'):>8.1f} {med(mode, 'cpu_us_per_request'):>11.1f}"
            f" {med(mode, 'wakeups_per_request'):>13.2f} {med(mode, 'cpu_cores'):>6.2f}"
            f" {med(mode, 'lateness_p99_ms'):>12.2f}"
        )
    for mode, runs in rows.items():
        each = ", ".join(f"{r['cpu_us_per_request']:.1f}" for r in runs)
        print(f"  per run µs/req {mode}: [{each}]")
    cpu = {mode: med(mode, "cpu_us_per_request") for mode in rows}
    wakes = {mode: med(mode, "wakeups_per_request") for mode in rows}
    extra_wakes = wakes["poisson"] - wakes["aligned"]
    per_wake = (cpu["poisson"] - cpu["aligned"]) / extra_wakes if extra_wakes > 0.05 else None
    print(
        f"  poisson vs closed: {cpu['poisson'] - cpu['closed']:+.1f} µs per request; taken apart:"
    )
    print(
        f"    the scheduler's own work (in-process, no network): "
        f"{micro['open_us'] - micro['closed_us']:+.2f} µs "
        f"({micro['open_us']:.2f} vs the closed loop's worker {micro['closed_us']:.2f})"
    )
    print(
        f"    the closed loop's traffic shape, sent by the scheduler (aligned − closed): "
        f"{cpu['aligned'] - cpu['closed']:+.1f} µs"
    )
    print(
        f"    arrivals spread out in time (poisson − aligned): "
        f"{cpu['poisson'] - cpu['aligned']:+.1f} µs, {extra_wakes:+.2f} loop wake-ups per "
        "request" + ("" if per_wake is None else f" (≈ {per_wake:.0f} µs each on this machine)")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", choices=["closed", "micro", *OPEN_MODES], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--max-in-flight", type=int, default=1000)
    args = ap.parse_args()
    if args.driver is None:
        _bench(args)
        return
    if args.driver == "micro":
        print(json.dumps(_micro()))
        return
    from loadgen import eventloop

    print(json.dumps(eventloop.run(_drive(args))))


if __name__ == "__main__":
    main()
