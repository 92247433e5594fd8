"""A long soak on the simulated engine: drift verdicts, nothing lost, a flat runner.

Not a test: a benchmark that prints its figures. It starts the simulated engine, runs a
real soak (the runner in its own process, exactly as ``soaktop run``) for two hours at
128 workers by default, samples the runner's RSS beside the completed-request count from
its snapshots, and at the end prints

- the endurance verdict: every drift and leak finding the record holds (a healthy engine
  must show none at the default soak policy);
- the journals against the record: requests.jsonl lines vs the record's counts,
  windows.jsonl lines vs the record's windows (nothing lost), and ``soaktop verify``;
- the runner's RSS over time and its growth per completed request after the first
  tenth of the load (target: ≤ 100 bytes per completed request, flat).

    .venv/bin/python bench/long_soak.py [--duration 7200] [--concurrency 128]
        [--window 60] [--scenario healthy] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import psutil

from soak.cli.demo import simulated_engine
from soak.record.journal import JsonlTail
from soak.record.models import RunRecord, load_record
from soak.run.config_load import load_config
from soak.run.spawn import start_runner

GROWTH_TARGET_B = 100.0


def _count_lines(path: Path) -> dict[str, int]:
    """requests.jsonl lines by phase and outcome."""
    out: dict[str, int] = {"lines": 0, "warmup": 0, "ok": 0, "failed": 0, "cancelled": 0}
    with path.open("rb") as fh:
        for raw in fh:
            line = orjson.loads(raw)
            out["lines"] += 1
            if line.get("phase") == "warmup":
                out["warmup"] += 1
            elif line.get("cancelled"):
                out["cancelled"] += 1
            elif line.get("ok"):
                out["ok"] += 1
            else:
                out["failed"] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=7200.0)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--window", type=int, default=60)
    ap.add_argument("--warmup", default=None, help="e.g. 60s or 500req")
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling interval")
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="soaktop-bench-long-"))
    with simulated_engine(
        replicas=2,
        gpus_per_replica=1,
        scenario=a.scenario,
        extra_args=["--max-num-seqs", "256", "--decode-ms-base", "20", "--noise"],
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
                "label": "bench-long",
                "series_window_s": a.window,
                "warmup": a.warmup,
                "gates": ["smoke"],
                "server_pid": [sim.proc.pid],
                "dcgm": [r["dcgm_url"] for r in sim.ready["replicas"] if r.get("dcgm_url")],
            },
            environ={},
        )
        handle = start_runner(cfg)
        proc = psutil.Process(handle.pid)
        tail = JsonlTail(handle.run_dir / "snapshots.jsonl")
        samples: list[tuple[float, float, int, str]] = []  # t, rss, completed, phase
        completed, phase, t0 = 0, "identity", time.monotonic()
        while handle.poll() is None:
            for snap in tail.read_new():
                completed, phase = snap["load"]["completed"], snap["phase"]
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                break
            samples.append((time.monotonic() - t0, rss, completed, phase))
            time.sleep(a.sample_s)
        handle.proc.wait()
    run_dir = handle.run_dir
    rec = load_record(run_dir)
    _print_header(a, rec)
    _print_endurance(rec)
    _print_counts(run_dir, rec)
    _print_memory(samples)
    print(f"  run dir: {run_dir}")
    return 0


def _print_header(a: argparse.Namespace, rec: RunRecord) -> None:
    load = rec.load
    print(
        f"long soak: {a.concurrency} workers, {a.duration:.0f} s, window {a.window} s, "
        f"scenario {a.scenario}, max_tokens {a.max_tokens} (simulated engine, 2 replicas)"
    )
    print(f"  verdict {rec.status.value}: " + ("; ".join(r.message for r in rec.reasons) or "-"))
    if load is not None:
        print(
            f"  completed {load.completed:,}, failed {load.failed:,}, "
            f"{load.output_tokens_per_s or 0:,.0f} tok/s over the load"
        )


def _print_endurance(rec: RunRecord) -> None:
    e = rec.endurance
    if e is None:
        print("  endurance: none in the record")
        return
    print(
        f"  endurance: {e.judged_windows} judged windows of {e.window_s} s, "
        f"policy {e.policy_source} ({len(e.policy)} thresholds)"
        + ("" if e.judged else f" — not judged: {e.not_judged_why}")
    )
    for f in e.drift:
        if f.state != "no_data":
            print(f"    drift {f.figure:22} {f.state:7} {f.words}")
    for leak in e.leaks:
        if leak.state != "no_data":
            print(f"    leak  {leak.resource:22} {leak.state:7} {leak.words}")
    breached = [t for t in rec.thresholds if t.metric.startswith(("drift.", "leak."))]
    bad = [t.condition for t in breached if t.state != "ok"]
    print(f"    drift/leak thresholds: {len(breached)} checked, not ok: {bad or 'none'}")


def _print_counts(run_dir: Path, rec: RunRecord) -> None:
    c = _count_lines(run_dir / "requests.jsonl")
    load = rec.load
    if load is not None:
        judged = load.completed + load.failed + load.cancelled
        print(
            f"  requests.jsonl: {c['lines']:,} lines ({c['warmup']:,} warm-up); the record: "
            f"{judged:,} judged (+ warm-up) = {judged + c['warmup']:,}; issued {load.issued:,} "
            f"→ {'nothing lost' if judged + c['warmup'] == c['lines'] else 'MISMATCH'}"
        )
    live = sum(1 for _ in (run_dir / "windows.jsonl").open("rb"))
    in_record = sum(w.completed + w.failed for w in rec.windows)
    print(
        f"  windows.jsonl: {live} lines; the record: {len(rec.windows)} windows holding "
        f"{in_record:,} requests"
    )
    verify = subprocess.run(
        [sys.executable, "-m", "soak", "verify", str(run_dir)], capture_output=True, text=True
    )
    print(f"  soaktop verify: exit {verify.returncode} {verify.stdout.strip()[:300]}")


def _print_memory(samples: list[tuple[float, float, int, str]]) -> None:
    load = [s for s in samples if s[3] in ("load", "drain")]
    if len(load) < 4:
        print("  runner RSS: too few samples")
        return
    settled = load[len(load) // 10 :]
    x = np.array([s[2] for s in settled], float)
    y = np.array([s[1] for s in settled], float)
    slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else float("nan")
    print("  runner RSS over the load (t, completed, RSS):")
    step = max(1, -(-len(load) // 12))  # about a dozen lines
    for t, rss, done, _ in load[::step]:
        print(f"    {t / 60:6.1f} min  {done:>10,}  {rss / 2**20:7.1f} MB")
    print(
        f"  growth per completed request after the first tenth: {slope:.1f} B "
        f"(target ≤ {GROWTH_TARGET_B:.0f} B: {'PASS' if slope <= GROWTH_TARGET_B else 'MISS'}); "
        f"peak {max(s[1] for s in samples) / 2**20:.1f} MB"
    )


if __name__ == "__main__":
    raise SystemExit(main())
