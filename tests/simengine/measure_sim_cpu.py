"""Measure the simulated engine's CPU at many concurrent streams (a script, not a test).

Starts ``python -m simengine`` as a subprocess, drives N closed-loop streaming chat
clients (aiohttp, in this process) against its replicas, and reports the simulator's own
CPU (utime+stime of its process from /proc) over a measurement window, with the token
rate the clients received.

    .venv/bin/python tests/simengine/measure_sim_cpu.py --streams 1024 --replicas 2 \\
        --max-num-seqs 512 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def worker(
    session: aiohttp.ClientSession, url: str, n: int, stop: float, counts: dict[str, int]
) -> None:
    body = {
        "model": "tiny-sim",
        "messages": [{"role": "user", "content": "Tell me about soak tests " * 8}],
        "max_tokens": 256,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    k = 0
    while time.monotonic() < stop:
        k += 1
        headers = {"X-Request-Id": f"cpu/load/chat/{n}-{k}"}
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            async for chunk in r.content.iter_any():
                counts["events"] += chunk.count(b"data: ")
                # token chunks: every choice chunk without a finish reason, less the role chunk
                counts["tokens"] += chunk.count(b'"finish_reason":null') - chunk.count(
                    b'"role":"assistant"'
                )
        counts["requests"] += 1


async def drive(urls: list[str], streams: int, seconds: float, pid: int) -> dict[str, float]:
    counts = {"events": 0, "tokens": 0, "requests": 0}
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    stop = time.monotonic() + seconds + 10
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        tasks = [
            asyncio.create_task(worker(session, urls[i % len(urls)], i, stop, counts))
            for i in range(streams)
        ]
        await asyncio.sleep(10)  # warm-up: every stream started and in steady state
        cpu0, ev0, t0 = proc_cpu_s(pid), counts["events"], time.monotonic()
        tok0 = counts["tokens"]
        await asyncio.sleep(seconds)
        cpu1, ev1, t1 = proc_cpu_s(pid), counts["events"], time.monotonic()
        tok1 = counts["tokens"]
        await asyncio.gather(*tasks, return_exceptions=True)
    wall = t1 - t0
    events = ev1 - ev0
    return {
        "wall_s": round(wall, 2),
        "sim_cpu_s": round(cpu1 - cpu0, 2),
        "sim_cpu_pct_of_one_core": round(100 * (cpu1 - cpu0) / wall, 1),
        "events_per_s": round(events / wall),
        "tokens_per_s": round((tok1 - tok0) / wall),
        "per_stream_tokens_per_s": round((tok1 - tok0) / wall / streams, 1),
        "per_stream_events_per_s": round(events / wall / streams, 1),
        "sim_cpu_us_per_event": round(1e6 * (cpu1 - cpu0) / max(events, 1), 1),
        "requests_done": counts["requests"],
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=1024)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[])
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="simcpu-"))
    ready = tmp / "ready.json"
    cmd = [sys.executable, "-m", "simengine", "--replicas", str(a.replicas),
           "--max-num-seqs", str(a.max_num_seqs), "--log-dir", str(tmp),
           "--ready-file", str(ready), *a.extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("simengine did not become ready")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        urls = [r["url"] for r in info["replicas"]]
        result = asyncio.run(drive(urls, a.streams, a.seconds, proc.pid))
        result |= {"streams": a.streams, "replicas": a.replicas, "max_num_seqs": a.max_num_seqs}
        print(json.dumps(result))
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
