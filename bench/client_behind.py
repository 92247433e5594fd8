"""Does the socket say when the client is the bottleneck? (issue 17 §3)

Starts ``bench/fast_server.py`` paced (one token per stream every 20 ms) and runs soaktop's
client (``loadgen.client.StreamClient`` on the runner's loop, ``loadgen.eventloop``) at 256,
1,024 and 2,048 concurrent streams, each for ``--seconds`` (default 14: a behind streak
can reach ``client_overload_s``, 10 s, and the verdict column say INVALID), in its own process,
with the receive-queue sampling on and (256 and 1,024) off, and prints side by side:
offered vs achieved tok/s (and what the server says it sent), ITL p50 against the pacing,
loop lag p99, the behind share (sampled reads that found bytes already queued,
``loadgen.read_health``), the longest stretch of seconds above ``max_client_behind``,
token events per read, and the client's CPU µs per token — sampling on vs off is its
cost. The whole bench takes under 2 minutes.

Run: ``.venv/bin/python bench/client_behind.py`` (``--seconds 6`` for a quick look).
The server shares the machine's cores with the client: say so when quoting the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.envelope import RequestResult

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

INTERVAL_MS = 20.0
OUTPUT_LEN = 256
RUNS = ((256, True), (256, False), (1024, True), (1024, False), (2048, True))


async def drive(url: str, streams: int, seconds: float, sample: bool) -> dict[str, object]:
    """One closed-loop load of ``streams`` workers for ``seconds``; its figures."""
    from loadgen.client import StreamClient
    from loadgen.envelope import RequestResult
    from loadgen.live import LiveLoadStats, behind_health
    from soak.judge.limits import MAX_CLIENT_BEHIND

    body = _request_body()
    live = LiveLoadStats(window_s=10)
    results: list[RequestResult] = []
    lags: list[float] = []
    t0 = time.perf_counter()

    def now_s() -> float:
        return time.perf_counter() - t0

    async with StreamClient(
        max_connections=streams, ignore_eos=True, sample_queue=sample
    ) as client:
        await client.warm_connection(url + "/v1/models")
        stop = False

        async def worker(w: int) -> None:
            seq = 0
            while not stop:
                r = RequestResult(request_id=f"b/{w}/{seq}", worker=w, prompt_id=0, sent_ns=0)
                results.append(r)
                seq += 1
                await client.stream_into(r, url + "/v1/completions", body)
                live.record(r, now_s())

        async def ticks() -> None:  # the runner's once-a-second tick, and the loop lag
            next_tick = 1.0
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.05)
                lags.append(max(0.0, time.perf_counter() - t - 0.05))
                if now_s() >= next_tick:
                    live.tick_reads(now_s(), MAX_CLIENT_BEHIND, True)
                    next_tick += 1.0

        cpu0 = os.times()
        t_start = now_s()
        tasks = [asyncio.create_task(worker(w)) for w in range(streams)]
        tick = asyncio.create_task(ticks())
        await asyncio.sleep(seconds)
        stop = True
        cpu1 = os.times()
        span = now_s() - t_start
        for t in (*tasks, tick):
            t.cancel()
        await asyncio.gather(*tasks, tick, return_exceptions=True)
    for r in results:  # a cut stream's reads count too
        if r.cancelled:
            live.record(_uncut(r), now_s())
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "streams": streams,
        "sampling": sample,
        **_figures(results, lags, cpu, span),
        **behind_health(live),
    }


def _request_body() -> bytes:
    """The one completion request every worker sends (paced, EOS ignored, usage asked)."""
    return json.dumps(
        {
            "model": "tiny",
            "prompt": "hello " * 32,
            "max_tokens": OUTPUT_LEN,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


def _figures(
    results: list[RequestResult], lags: list[float], cpu: float, span: float
) -> dict[str, object]:
    """Throughput, ITL, loop lag and CPU cost of one load's results."""
    import numpy as np

    from loadgen.stats import percentile

    tokens = sum(r.chunks for r in results)
    gaps = np.sort(np.concatenate([np.asarray(r.itl_ns, dtype=np.float64) for r in results]))
    lag = np.sort(np.asarray(lags))
    return {
        "achieved_tok_s": tokens / span,
        "itl_p50_ms": percentile(gaps, 50, "nearest-rank") / 1e6 if gaps.size else None,
        "itl_zero_share": float((gaps == 0).mean()) if gaps.size else None,
        "loop_lag_p99_s": percentile(lag, 99, "nearest-rank") if lag.size else None,
        "cpu_us_per_token": cpu / tokens * 1e6 if tokens else None,
        "cpu_percent": cpu / span * 100,
    }


def _uncut(r: object) -> object:
    """A cancelled result as the live stats would count its reads (they skip cancelled)."""
    from dataclasses import replace

    return replace(r, cancelled=False)  # type: ignore[type-var]


def child(args: argparse.Namespace) -> None:
    from loadgen import eventloop

    out = eventloop.run(drive(args.url, args.streams, args.seconds, not args.no_sampling))
    print("RESULT " + json.dumps(out), flush=True)


def server_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/bench/stats", timeout=5) as resp:
        stats: dict[str, int] = json.loads(resp.read())
        return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=14.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--no-sampling", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    srv, url = _start_server()
    rows = []
    try:
        for streams, sample in RUNS:
            before = server_stats(url)
            t = time.perf_counter()
            cmd = [sys.executable, __file__, "--child", "--url", url]
            cmd += ["--streams", str(streams), "--seconds", f"{args.seconds:g}"]
            if not sample:
                cmd.append("--no-sampling")
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
            took = time.perf_counter() - t
            after = server_stats(url)
            got = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if not got:
                print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"run at {streams} streams gave no result")
            row = json.loads(got[-1][len("RESULT ") :])
            row["offered_tok_s"] = streams * 1000.0 / INTERVAL_MS
            row["server_sent_tok_s"] = (after["tokens"] - before["tokens"]) / took
            rows.append(row)
            time.sleep(0.5)  # let the server's streams close
    finally:
        srv.terminate()
        srv.wait(10)
    _print_table(rows, args.seconds)


def _start_server() -> tuple[subprocess.Popen[str], str]:
    """``bench/fast_server.py`` paced at ``INTERVAL_MS``, on a free port; it and its URL."""
    srv = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "fast_server.py"),
            "--port",
            "0",
            "--token-interval-ms",
            f"{INTERVAL_MS:g}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert srv.stdout is not None
    line = srv.stdout.readline()
    if not line.startswith("READY "):
        srv.kill()
        raise SystemExit(f"fast_server did not start: {line!r}")
    return srv, f"http://127.0.0.1:{int(line.split()[1])}"


def _print_table(rows: list[dict[str, Any]], seconds: float) -> None:
    """The runs side by side, one row each, and what the columns mean."""
    print(
        f"cores: {os.cpu_count()} (server and client share them); pacing {INTERVAL_MS:g} ms, "
        f"{OUTPUT_LEN} tokens a request, {seconds:g} s a run\n"
    )
    head = (
        "streams", "sampl", "offered", "achieved", "srv sent", "ITL p50", "ITL=0",
        "lag p99", "behind", "streak", "ev/read", "CPU%", "µs/tok", "verdict",
    )  # fmt: skip
    print(" ".join(f"{h:>9}" for h in head))
    for r in rows:
        cells = (
            r["streams"],
            "on" if r["sampling"] else "off",
            f"{r['offered_tok_s']:.0f}",
            f"{r['achieved_tok_s']:.0f}",
            f"{r['server_sent_tok_s']:.0f}",
            _ms(r["itl_p50_ms"]),
            _pct(r["itl_zero_share"]),
            _ms(None if r["loop_lag_p99_s"] is None else r["loop_lag_p99_s"] * 1000),
            _pct(r["behind_fraction"]),
            "-" if r["behind_over_limit_s"] is None else f"{r['behind_over_limit_s']:.0f}s",
            "-" if r["events_per_read"] is None else f"{r['events_per_read']:.2f}",
            f"{r['cpu_percent']:.0f}",
            "-" if r["cpu_us_per_token"] is None else f"{r['cpu_us_per_token']:.1f}",
            _verdict(r),
        )
        print(" ".join(f"{c!s:>9}" for c in cells))
    print(
        "\nbehind: share of sampled reads that found bytes already queued in the socket;"
        " streak: longest run of seconds above max_client_behind (INVALID from"
        " client_overload_s, 10 s); ev/read: token events per token-carrying read."
    )


def _verdict(r: dict[str, object]) -> str:
    """What the ``client_behind`` rule makes of the run (the default limits)."""
    from soak.judge.limits import CLIENT_OVERLOAD_S

    streak = r["behind_over_limit_s"]
    if streak is None:
        return "unmeasured"
    assert isinstance(streak, int | float)
    return "INVALID" if streak >= CLIENT_OVERLOAD_S else "ok"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}ms"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


if __name__ == "__main__":
    main()
