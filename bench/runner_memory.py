"""Runner memory at 1,024 streams: peak RSS and growth per completed request.

Not a test: a benchmark that prints its figures. It starts the simulated engine, runs a
real soak (the runner in its own process, exactly as ``soaktop run``), samples the
runner's RSS every 0.5 s beside the completed-request count from its snapshots, and fits
the growth per completed request over the second half of the load (after warm-up).

Targets (issue #2): RSS < 300 MB at 1,024 streams; growth ≤ ~100 bytes per completed
request (per-request data lives on disk, not in RAM).

    .venv/bin/python bench/runner_memory.py [--concurrency 1024] [--duration 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from soak.cli.demo import simulated_engine
from soak.record.journal import JsonlTail
from soak.record.models import load_record
from soak.run.config_load import load_config
from soak.run.spawn import start_runner

RSS_TARGET_MB = 300.0
GROWTH_TARGET_B = 100.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="soaktop-bench-mem-"))
    with simulated_engine(
        replicas=2,
        gpus_per_replica=1,
        extra_args=["--max-num-seqs", "512", "--decode-ms-base", "20"],
    ) as sim:
        cfg = load_config(
            {
                "endpoints": sim.urls,
                "model": sim.model,
                "concurrency": a.concurrency,
                "duration_s": a.duration,
                "max_tokens": a.max_tokens,
                "ignore_eos": True,
                "out": out,
                "headless": True,
                "label": "bench-mem",
            },
            environ={},
        )
        handle = start_runner(cfg)
        proc = psutil.Process(handle.pid)
        tail = JsonlTail(handle.run_dir / "snapshots.jsonl")
        samples: list[tuple[float, float, int, str]] = []  # t, rss, completed, phase
        completed, phase = 0, "identity"
        while handle.poll() is None:
            for snap in tail.read_new():
                completed, phase = snap["load"]["completed"], snap["phase"]
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                break
            samples.append((time.monotonic(), rss, completed, phase))
            time.sleep(0.5)
        handle.proc.wait()
    rec = load_record(handle.run_dir)
    load_samples = [s for s in samples if s[3] == "load"]
    half = load_samples[len(load_samples) // 2 :]
    x = np.array([s[2] for s in half], float)
    y = np.array([s[1] for s in half], float)
    slope = float(np.polyfit(x, y, 1)[0]) if len(half) > 3 and np.ptp(x) > 0 else float("nan")
    peak_mb = max(s[1] for s in samples) / 2**20
    barrier_mb = (load_samples[0][1] / 2**20) if load_samples else float("nan")
    print(
        f"runner memory, {a.concurrency} streams, {a.duration:.0f} s load, "
        f"max_tokens {a.max_tokens} (simulated engine, 2 replicas)"
    )
    print(
        f"  verdict {rec.status.value}; completed {rec.load.completed if rec.load else 0}; "
        f"workers started {rec.load.workers_started if rec.load else 0}"
    )
    print(f"  RSS at load start   {barrier_mb:8.1f} MB")
    print(
        f"  RSS peak            {peak_mb:8.1f} MB   target < {RSS_TARGET_MB:.0f} MB: "
        f"{'PASS' if peak_mb < RSS_TARGET_MB else 'MISS'}"
    )
    print(
        f"  growth per request  {slope:8.1f} B    (fit over {int(np.ptp(x)) if len(x) else 0} "
        f"requests in the second half of the load) target ≤ {GROWTH_TARGET_B:.0f} B: "
        f"{'PASS' if slope <= GROWTH_TARGET_B else 'MISS'}"
    )
    print(f"  run dir: {handle.run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
