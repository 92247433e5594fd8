"""What does the open-loop scheduler cost the client? Poisson arrivals vs the closed loop.

Prints, side by side from one run, the client's CPU µs per request for (a) the closed loop
(``loadgen.workers.LoadGenerator``, ``--concurrency C``) and (b) open-loop Poisson arrivals
(``loadgen.open_loop.OpenLoopGenerator``) at the rate (a) achieved — the same throughput
against the same server — and their difference. Target (issue 16 §5): the scheduler costs
at most a few µs per request more.

Method
- Server: ``bench/fast_server.py`` (paced: one token per stream every ``--interval-ms``),
  its own process, shared by every run.
- Each client run is its own process (``--driver``): the product's generator, the
  product's StreamClient and event loop (uvloop when installed), a fixed prompt; CPU is the
  driver process's own user+sys (``time.process_time``) from the barrier's release to the
  end of the drain, so imports and connection set-up are left out for both; µs/request =
  that CPU ÷ completed requests.
- The closed loop runs first to find the throughput; then the runs alternate (closed,
  open, closed, open, ...) ``--reps`` times and the medians are printed, so drift of the
  machine's load hits both alike.

Usage:  .venv/bin/python bench/arrival_cost.py [--concurrency 16] [--duration 10] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


async def _drive(args: argparse.Namespace) -> dict[str, float]:
    from loadgen.arrivals import arrival_offsets
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
    conns = args.concurrency if args.driver == "closed" else args.max_in_flight
    plan = LoadPlan(
        endpoints=(args.url,),
        concurrency=args.concurrency if args.driver == "closed" else min(conns, 64),
        duration_s=args.duration,
        max_requests=None,
        drain_timeout_s=30.0,
        barrier_timeout_s=30.0,
        request_id_prefix="bench/load/completions",
    )
    async with StreamClient(max_connections=conns + 16, ignore_eos=True) as client:
        gen: LoadGenerator
        if args.driver == "closed":
            gen = LoadGenerator(plan, client, pool, bodies, done.append)
        else:
            offsets = arrival_offsets("poisson", args.rate, None, 0)
            gen = OpenLoopGenerator(
                plan, client, pool, bodies, done.append, offsets, args.max_in_flight
            )
        assert await gen.start_workers()
        cpu0, t0 = time.process_time(), time.perf_counter()
        await gen.run()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    ok = sum(1 for r in done if r.ok)
    late = sorted((r.sent_ns - r.intended_ns) / 1e6 for r in done if r.intended_ns is not None)
    return {
        "ok": ok,
        "failed": len(done) - ok,
        "req_per_s": ok / args.duration,
        "cpu_us_per_request": cpu / ok * 1e6 if ok else float("nan"),
        "cpu_cores": cpu / wall,
        "lateness_p99_ms": late[int(0.99 * (len(late) - 1))] if late else float("nan"),
        "held_by_cap": float(getattr(gen.state, "held_by_cap", 0)),
    }


def _run_driver(args: argparse.Namespace, driver: str, rate: float | None) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--driver", driver, "--url", args.url]
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
        rows: dict[str, list[dict[str, float]]] = {"closed": [], "poisson": []}
        for _ in range(args.reps):
            rows["closed"].append(_run_driver(args, "closed", None))
            rows["poisson"].append(_run_driver(args, "open", rate))
    finally:
        server.terminate()
        server.wait(10)
    _print(args, rate, rows)


def _print(args: argparse.Namespace, rate: float, rows: dict[str, list[dict[str, float]]]) -> None:
    print(
        f"arrival_cost: fast_server paced {args.interval_ms:g} ms/token, {args.output_len} "
        f"tokens/request, {args.duration:g} s per run, {args.reps} alternating reps (median)"
    )
    print(f"  closed loop at concurrency {args.concurrency}; Poisson at {rate:.1f} req/s")
    print(f"  {'mode':<8} {'req/s':>8} {'CPU µs/req':>11} {'cores':>6} {'late p99 ms':>12}")
    med: dict[str, float] = {}
    for mode, runs in rows.items():
        med[mode] = statistics.median(r["cpu_us_per_request"] for r in runs)
        print(
            f"  {mode:<8} {statistics.median(r['req_per_s'] for r in runs):>8.1f} "
            f"{med[mode]:>11.1f} {statistics.median(r['cpu_cores'] for r in runs):>6.2f} "
            f"{statistics.median(r['lateness_p99_ms'] for r in runs):>12.2f}"
        )
    each = ", ".join(f"{r['cpu_us_per_request']:.1f}" for r in rows["poisson"])
    base = ", ".join(f"{r['cpu_us_per_request']:.1f}" for r in rows["closed"])
    print(f"  per run µs/req: closed [{base}], poisson [{each}]")
    print(f"  scheduler cost: {med['poisson'] - med['closed']:+.1f} µs per request")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", choices=["closed", "open"], help=argparse.SUPPRESS)
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
    from loadgen import eventloop

    print(json.dumps(eventloop.run(_drive(args))))


if __name__ == "__main__":
    main()
