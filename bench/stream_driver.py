"""A tiny closed-loop driver for ``loadgen.client.StreamClient`` (the bench's client (a)).

``concurrency`` tasks each send one streaming request after another until
``num_requests`` were issued — the same shape as ``vllm bench serve --max-concurrency N
--request-rate inf``. Run in its own process so the bench can measure exactly its CPU.

Writes to ``--out DIR``: ``summary.json`` (counts, failures, TTFT p50, throughput) and
``token_times_ns.i64`` (the arrival time, ``perf_counter_ns``, of every token-carrying
event, native int64 — the bench uses them to pick a steady-state window). ``perf_counter`` is
CLOCK_MONOTONIC on Linux, so these times line up with the bench's own samples.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from loadgen import eventloop
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult


async def run(args: argparse.Namespace) -> dict[str, object]:
    base = args.url.rstrip("/")
    chat = args.endpoint.endswith("chat/completions")
    prompt = " ".join(["hello"] * args.input_len)
    req: dict[str, object] = {
        "model": args.model,
        "max_tokens": args.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        req["messages"] = [{"role": "user", "content": prompt}]
    else:
        req["prompt"] = prompt
    body = orjson.dumps(req)
    url = base + args.endpoint
    results: list[RequestResult] = []
    issued = 0
    failures: collections.Counter[str] = collections.Counter()

    async with StreamClient(
        max_connections=args.concurrency, sanity_checks=not args.no_sanity, ignore_eos=True
    ) as client:
        await client.warm_connection(base + "/v1/models")

        async def worker(w: int) -> None:
            nonlocal issued
            while issued < args.num_requests:
                seq = issued
                issued += 1
                r = await client.stream(
                    url, body, request_id=f"bench/load/{seq}", worker=w, prompt_id=seq
                )
                results.append(r)
                if not r.ok:
                    failures[f"{r.failure}: {r.failure_detail}"[:160]] += 1

        t0 = time.perf_counter_ns()
        await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
        t1 = time.perf_counter_ns()

    ok = [r for r in results if r.ok]
    times: list[int] = []
    for r in ok:
        if r.first_token_ns is None:
            continue
        t = r.first_token_ns
        times.append(t)
        for gap in r.itl_ns:
            t += gap
            times.append(t)
    times.sort()
    with (Path(args.out) / "token_times_ns.i64").open("wb") as f:
        array.array("q", times).tofile(f)  # no numpy here: keep the client process lean
    ttfts = sorted((r.first_token_ns - r.sent_ns) / 1e6 for r in ok if r.first_token_ns)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    return {
        "requests": len(results),
        "ok": len(ok),
        "failures": dict(failures.most_common(5)),
        "chunks": len(times),
        "output_tokens": out_tokens,
        "usage_missing": sum(1 for r in ok if r.output_tokens is None),
        "sanity_flagged": sum(1 for r in ok if r.sanity),
        "duration_s": (t1 - t0) / 1e9,
        "output_throughput": out_tokens / ((t1 - t0) / 1e9) if t1 > t0 else 0.0,
        "median_ttft_ms": ttfts[len(ttfts) // 2] if ttfts else None,
        "pid": os.getpid(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--endpoint", default="/v1/completions")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--num-requests", type=int, required=True)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--asyncio-loop",
        action="store_true",
        help="force asyncio's own loop (the runner uses uvloop when installed)",
    )
    ap.add_argument(
        "--no-sanity", action="store_true", help="turn the per-response sanity checks off"
    )
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # The runner's own loop choice (loadgen.eventloop), so the bench measures the product.
    summary = eventloop.run(run(args), prefer_uvloop=not args.asyncio_loop)
    (Path(args.out) / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
