"""Does watching the engine cost the measuring loop? Loop lag with and without scraping.

Prints, per arm and round, the runner's own event-loop lag (the worst lateness of its
0.1 s timer in each snapshot interval: p50 / p99 / max over the load's and the drain's
intervals, the ones the record keeps, and the record's ``client_health`` p99 / max), the
engine scrapes taken and the requests completed; then each arm's lag beside the
no-scraping arm's. Before the runs, the parse time of one of the engine's real pages on
the loop, the loop's share of a page handed to the parser process and one host sample's
cost; after them, the per-line cost of classifying the server log.

Method
- Engine: the simulated vLLM (``soak.cli.demo.simulated_engine``), ``--replicas`` replicas
  (default 1: eight real replicas are too heavy for a 2-core box); the runner is given
  ``--endpoints`` endpoint URLs (default 8) cycling over the replicas, so with one replica
  the same server is scraped 8 times a second — 8 pages of ~22 KB parsed a second, as 8
  vLLM endpoints would give — and the load is spread over the 8 URLs.
- Runner: ``python -m soak run`` headless, closed loop at ``--concurrency`` (32) for
  ``--duration`` (12 s), ``--telemetry-interval 1``, snapshots every 0.25 s (a TOML
  ``[run]`` file), the replicas' logs followed (``--server-log``) in every arm, no gates,
  ``--no-nvml``.
- Arms (``SOAKTOP_BENCH_METRICS``, read by ``soak.watch.parse_worker``; only the engine watch
  differs between them): ``none`` — no periodic ``/metrics`` scrapes (the counter
  snapshots at the barrier and the drain remain); ``loop`` — scraped every second and
  parsed on the runner's loop (the old path); ``worker`` — scraped every second, parsed in
  the helper process (the default). Arms alternate within each round.

Usage:  .venv/bin/python bench/loop_lag.py [--rounds 2] [--duration 12] [--endpoints 8]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from probes.engine_metrics import parse_page
from probes.host import ProcessSampler
from probes.server_log import classify
from soak.cli.demo import simulated_engine
from soak.record.journal import read_jsonl
from soak.watch.parse_worker import BENCH_ENV, ParseWorker

ARMS = ("none", "loop", "worker")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:7.2f}"


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]  # nearest rank


def page_costs(url: str) -> dict[str, float]:
    """Parse time of the engine's page on this loop, and the loop's CPU per page handed
    to the helper (write, read, unpickle) with the helper's wall round trip."""
    body = httpx.get(f"{url}/metrics").content
    for _ in range(5):
        parse_page(body, 0.0)
    n = 100
    t0 = time.perf_counter()
    for _ in range(n):
        parse_page(body, 0.0)
    parse_s = (time.perf_counter() - t0) / n

    async def handed() -> tuple[float, float]:
        w = ParseWorker()
        try:
            assert await w.ready()  # start-up is paid once, at watch start (prestart)
            cpu0, t0 = time.thread_time(), time.perf_counter()
            for _ in range(n):
                await w.engine(body, 0.0)
            return (time.thread_time() - cpu0) / n, (time.perf_counter() - t0) / n
        finally:
            await w.aclose()

    loop_cpu_s, round_trip_s = asyncio.run(handed())
    sampler = ProcessSampler()
    t0 = time.perf_counter()
    for _ in range(n):
        sampler.sample()
    return {
        "host_sample_s": (time.perf_counter() - t0) / n,
        "page_kb": len(body) / 1024,
        "parse_s": parse_s,
        "handoff_loop_cpu_s": loop_cpu_s,
        "handoff_round_trip_s": round_trip_s,
    }


def run_arm(arm: str, urls: list[str], logs: list[str], args: argparse.Namespace) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"looplag-{arm}-"))
    conf = out / "bench.toml"
    conf.write_text("[run]\nsnapshot_interval_s = 0.25\n")
    cmd = [sys.executable, "-m", "soak", "run", "--model", args.model, "--out", str(out)]
    cmd += ["--config", str(conf), "--headless", "--interval", "5", "--no-gates", "--no-nvml"]
    cmd += ["--duration", f"{args.duration:g}", "--concurrency", str(args.concurrency)]
    cmd += ["--max-tokens", "64", "--telemetry-interval", "1"]
    for i in range(args.endpoints):
        cmd += ["--endpoint", urls[i % len(urls)]]
    for log in logs:
        cmd += ["--server-log", log]
    env = os.environ | {BENCH_ENV: arm}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    dirs = [d for d in out.iterdir() if d.is_dir()]
    if len(dirs) != 1:
        raise SystemExit(f"arm {arm}: no run directory (exit {proc.returncode}):\n{proc.stdout}")
    run_dir = dirs[0]
    rec = orjson.loads((run_dir / "record.json").read_bytes())
    lags = [
        s["client"]["loop_lag_s"]
        for s in read_jsonl(run_dir / "snapshots.jsonl")
        if s.get("phase") in ("load", "drain") and s["client"].get("loop_lag_s") is not None
    ]
    health = rec.get("client_health") or {}
    engines = (rec.get("telemetry") or {}).get("engines") or []
    load = rec.get("load") or {}
    return {
        "arm": arm,
        "p50": _pct(lags, 50),
        "p99": _pct(lags, 99),
        "max": max(lags) if lags else None,
        "n": len(lags),
        "rec_p99": health.get("loop_lag_p99_s"),
        "rec_max": health.get("loop_lag_max_s"),
        "cpu_max": health.get("cpu_percent_max"),
        "scrapes": sum(int(e.get("scrapes") or 0) for e in engines),
        "completed": load.get("completed", load.get("requests_completed")),
        "verdict": rec.get("status"),
        "run_dir": str(run_dir),
    }


def log_costs(logs: list[str]) -> tuple[int, float] | None:
    """Lines in the replicas' logs and the classifier's time per line."""
    lines: list[str] = []
    for log in logs:
        p = Path(log)
        if p.exists():
            lines += p.read_text(errors="replace").splitlines()
    if not lines:
        return None
    sample = (lines * (20000 // len(lines) + 1))[:20000]
    t0 = time.perf_counter()
    for line in sample:
        classify(line)
    return len(lines), (time.perf_counter() - t0) / len(sample)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=12.0, help="load seconds per arm")
    ap.add_argument("--endpoints", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    extra = ["--decode-ms-base", "5", "--max-num-seqs", "512"]
    with simulated_engine(replicas=args.replicas, gpus_per_replica=1, extra_args=extra) as sim:
        args.model = sim.model
        urls = list(sim.urls)
        logs = [r["log"] for r in sim.ready["replicas"]]
        costs = page_costs(urls[0])
        print(
            f"engine page: {costs['page_kb']:.1f} KB; parsed on the loop "
            f"{costs['parse_s'] * 1e3:.2f} ms/page; handed to the helper: "
            f"{costs['handoff_loop_cpu_s'] * 1e6:.0f} µs of loop CPU/page, "
            f"{costs['handoff_round_trip_s'] * 1e3:.2f} ms round trip; one host sample "
            f"(psutil) {costs['host_sample_s'] * 1e6:.0f} µs"
        )
        print(
            f"{args.endpoints} endpoints over {args.replicas} replica(s), scraped every 1 s; "
            f"concurrency {args.concurrency}, {args.duration:g} s load per arm; lag = worst "
            "timer lateness per 0.25 s snapshot interval, load and drain (ms)"
        )
        head = (
            f"{'round':>5} {'arm':>6} {'p50':>7} {'p99':>7} {'max':>7} {'rec p99':>7} "
            f"{'rec max':>7} {'n':>3} {'scrapes':>7} {'cpu%max':>7} {'done':>6}  verdict"
        )
        print(head)
        results: list[dict[str, Any]] = []
        for rnd in range(1, args.rounds + 1):
            for arm in ARMS:
                r = run_arm(arm, urls, logs, args) | {"round": rnd}
                results.append(r)
                print(
                    f"{rnd:>5} {arm:>6} {_ms(r['p50'])} {_ms(r['p99'])} {_ms(r['max'])} "
                    f"{_ms(r['rec_p99'])} {_ms(r['rec_max'])} {r['n']:>3} {r['scrapes']:>7} "
                    f"{r['cpu_max'] or 0:>7.0f} {r['completed'] or 0:>6}  {r['verdict']}",
                    flush=True,
                )
        lc = log_costs(logs)
    print("\nratio to the no-scraping arm, same round (p50 / p99 / max):")
    for rnd in range(1, args.rounds + 1):
        base = next(r for r in results if r["round"] == rnd and r["arm"] == "none")
        for r in results:
            if r["round"] != rnd or r["arm"] == "none":
                continue
            ratios = [
                f"{r[k] / base[k]:.2f}" if r[k] is not None and base[k] else "-"
                for k in ("p50", "p99", "max")
            ]
            print(f"  round {rnd} {r['arm']:>6}: {' / '.join(ratios)}")
    for arm in ARMS:
        p99s = [r["p99"] for r in results if r["arm"] == arm and r["p99"] is not None]
        if p99s:
            print(f"  {arm:>6}: mean p99 over rounds {statistics.mean(p99s) * 1e3:.2f} ms")
    if lc is not None:
        n, per_line = lc
        print(
            f"server log: {n} lines written by the replicas over the whole bench; "
            f"classifying costs {per_line * 1e6:.1f} µs/line on the loop "
            f"({per_line * 1e4 * 1e3:.1f} ms for a 10,000-line burst)"
        )


if __name__ == "__main__":
    main()
