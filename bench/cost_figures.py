"""The client-cost bench's figures: what one client run measured, its steady-state
analysis, and the printed table, notes and targets (``bench/client_cost.py`` runs them).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import psutil

OUTPUT_LEN = 256
SAMPLE_S = 0.1
TARGET_PACED_US = 25.0
TARGET_UNPACED_US = 7.0
TARGET_CONCURRENCY = 256


@dataclass
class Spec:
    mode: str  # "paced" | "unpaced"
    concurrency: int
    interval_ms: float  # 0 when unpaced
    num_requests: int

    @property
    def offered_tok_s(self) -> float | None:
        return self.concurrency * 1000.0 / self.interval_ms if self.interval_ms else None


@dataclass
class Result:
    spec: Spec
    client: str  # "soaktop" | "vllm"
    cmd: str
    sanity: bool | None = None
    """soaktop only: whether its per-response sanity checks were on."""
    ok: int = 0
    requests: int = 0
    window_s: float = 0.0
    window_tokens: int = 0
    cpu_us_per_token: float = float("nan")
    achieved_tok_s: float = float("nan")
    ttft_p50_ms: float | None = None
    client_cores: float = float("nan")
    server_cores: float = float("nan")
    other_cores: float = float("nan")
    peak_rss_mb: float = float("nan")
    wall_s: float = 0.0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The client column: ``soaktop`` with its sanity setting when it was varied."""
        return self.client if self.sanity is None else f"{self.client} {self.sanity_word}"

    @property
    def sanity_word(self) -> str:
        return "on" if self.sanity else "off"

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_us_per_token * OUTPUT_LEN

    @property
    def kept_up(self) -> bool | None:
        offered = self.spec.offered_tok_s
        if offered is None or self.achieved_tok_s != self.achieved_tok_s:
            return None
        return self.achieved_tok_s >= 0.95 * offered


def analyse(res: Result, samples: np.ndarray, token_times_s: np.ndarray) -> None:
    """Fill the window figures from the client's token arrival times and the samples."""
    res.peak_rss_mb = float(samples[:, 2].max()) / 2**20 if len(samples) else float("nan")
    n = token_times_s.size
    if n < 100 or len(samples) < 3:
        res.error = res.error or f"too little data ({n} tokens, {len(samples)} samples)"
        return
    tok = np.sort(token_times_s)
    lo, hi = tok[int(0.10 * n)], tok[int(0.90 * n) - 1]
    t, cpu, srv, busy, me = (samples[:, i] for i in (0, 1, 3, 4, 5))
    if hi - lo < 3 * SAMPLE_S or lo < t[0] or hi > t[-1]:
        res.notes.append("window shorter than the sampling can resolve")
    res.window_s = float(hi - lo)
    res.window_tokens = int(np.searchsorted(tok, hi, "right") - np.searchsorted(tok, lo, "left"))
    d_cpu = float(np.interp(hi, t, cpu) - np.interp(lo, t, cpu))
    d_srv = float(np.interp(hi, t, srv) - np.interp(lo, t, srv))
    res.cpu_us_per_token = d_cpu / res.window_tokens * 1e6
    res.achieved_tok_s = res.window_tokens / res.window_s
    res.client_cores = d_cpu / res.window_s
    res.server_cores = d_srv / res.window_s
    d_busy = float(np.interp(hi, t, busy) - np.interp(lo, t, busy))
    d_me = float(np.interp(hi, t, me) - np.interp(lo, t, me))  # this bench's sampling
    res.other_cores = max(0.0, (d_busy - d_cpu - d_srv - d_me) / res.window_s)
    if res.other_cores > 0.25:
        res.notes.append(
            f"other processes used {res.other_cores:.2f} cores during the window: noisy figure"
        )


def median_run(runs: list[Result]) -> Result:
    """The run with the median µs/token (noting the spread) — machines here are shared."""
    good = sorted((r for r in runs if not r.error), key=lambda r: r.cpu_us_per_token)
    if not good:
        return runs[0]
    mid = good[(len(good) - 1) // 2]
    if len(runs) > 1:
        spread = ", ".join(f"{r.cpu_us_per_token:.1f}" for r in good)
        mid.notes.append(f"median of {len(runs)} runs (µs/token: {spread})")
    return mid


def fmt(x: float | None, spec: str = ".1f") -> str:
    if x is None or x != x:
        return "—"
    return format(x, spec)


def print_table(results: list[Result]) -> None:
    head = (
        f"{'pacing':<14} {'conc':>5} {'client':<11} {'µs/tok':>7} {'µs/req':>8} "
        f"{'achieved':>9} {'offered':>8} {'kept up':>7} {'TTFT p50':>9} "
        f"{'cli cores':>9} {'srv cores':>9} {'peak RSS':>9} {'ok/req':>11}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        s = r.spec
        pacing = f"paced {s.interval_ms:g} ms" if s.mode == "paced" else "unpaced"
        if r.error:
            print(f"{pacing:<14} {s.concurrency:>5} {r.label:<11} ERROR: {r.error}")
            continue
        kept = {True: "yes", False: "NO", None: "—"}[r.kept_up]
        offered = fmt(s.offered_tok_s, ".0f")
        print(
            f"{pacing:<14} {s.concurrency:>5} {r.label:<11} {fmt(r.cpu_us_per_token):>7} "
            f"{fmt(r.cpu_us_per_request, '.0f'):>8} {fmt(r.achieved_tok_s, '.0f'):>9} "
            f"{offered:>8} {kept:>7} {fmt(r.ttft_p50_ms):>6} ms "
            f"{fmt(r.client_cores, '.2f'):>9} {fmt(r.server_cores, '.2f'):>9} "
            f"{fmt(r.peak_rss_mb, '.0f'):>6} MB {r.ok:>5}/{r.requests:<5}"
        )
        for note in r.notes:
            print(f"{'':<14} {'':>5} {'':<11} note: {note}")


def saturation_notes(results: list[Result]) -> list[str]:
    notes = []
    for r in results:
        if r.error:
            continue
        s = r.spec
        where = f"{s.mode} {s.concurrency} ({r.label})"
        total = r.client_cores + r.server_cores
        if r.server_cores >= 0.9:
            notes.append(f"{where}: SERVER saturated ({r.server_cores:.2f} cores)")
        if r.client_cores >= 0.9:
            notes.append(
                f"{where}: CLIENT saturated ({r.client_cores:.2f} cores of its 1) — its "
                "TTFT/ITL include its own queueing"
            )
        if total >= 1.8 and psutil.cpu_count() == 2:
            notes.append(f"{where}: the 2-core machine is saturated ({total:.2f} cores)")
        if r.kept_up is False:
            notes.append(
                f"{where}: achieved {r.achieved_tok_s:.0f} of {s.offered_tok_s:.0f} tok/s "
                "offered — the client or the server fell behind (see cores)"
            )
    return notes


def sanity_lines(results: list[Result]) -> list[str]:
    """The sanity checks' cost per cell run both ways: on vs off, µs/token."""
    off = {
        (r.spec.mode, r.spec.concurrency): r
        for r in results
        if r.client == "soaktop" and r.sanity is False and not r.error
    }
    lines = []
    for r in results:
        o = off.get((r.spec.mode, r.spec.concurrency))
        if r.client != "soaktop" or r.sanity is not True or r.error or o is None:
            continue
        d = r.cpu_us_per_token - o.cpu_us_per_token
        lines.append(
            f"  sanity checks, {r.spec.mode} {r.spec.concurrency}: on {r.cpu_us_per_token:.1f} "
            f"vs off {o.cpu_us_per_token:.1f} µs/token ({d:+.1f}, {d / o.cpu_us_per_token:+.0%})"
        )
    return lines


def targets(results: list[Result]) -> list[str]:
    lines = []
    ours = {
        (r.spec.mode, r.spec.concurrency): r
        for r in results
        if r.client == "soaktop" and r.sanity is not False  # as the product runs
    }
    for mode, limit in (("paced", TARGET_PACED_US), ("unpaced", TARGET_UNPACED_US)):
        r = ours.get((mode, TARGET_CONCURRENCY))
        if r is None:
            lines.append(f"{mode} {TARGET_CONCURRENCY} streams ≤ {limit:g} µs/token: NOT RUN")
            continue
        if r.error:
            lines.append(f"{mode} {TARGET_CONCURRENCY} ≤ {limit:g} µs/token: MISS (run failed)")
            continue
        ok = r.cpu_us_per_token <= limit and r.kept_up is not False and r.ok == r.requests
        verdict = "PASS" if ok else "MISS"
        extra = "" if r.kept_up is not False else ", did not keep up"
        lines.append(
            f"{verdict}: {mode} at {TARGET_CONCURRENCY} streams: {r.cpu_us_per_token:.1f} "
            f"µs CPU/token (target ≤ {limit:g}){extra}"
        )
    lines += sanity_lines(results)
    theirs = {(r.spec.mode, r.spec.concurrency): r for r in results if r.client == "vllm"}
    for key, r in sorted(ours.items()):
        v = theirs.get(key)
        if v is not None and not r.error and not v.error:
            lines.append(
                f"  (vs vllm bench serve, same run) {key[0]} {key[1]}: "
                f"{r.cpu_us_per_token:.1f} vs {v.cpu_us_per_token:.1f} µs/token "
                f"({r.cpu_us_per_token / v.cpu_us_per_token:.2f}×)"
            )
    for (mode, conc), r in sorted(ours.items()):
        limit = TARGET_PACED_US if mode == "paced" else TARGET_UNPACED_US
        if conc == TARGET_CONCURRENCY or r.error:
            continue
        mark = "ok" if r.cpu_us_per_token <= limit else "over"
        lines.append(
            f"  (info) {mode} at {conc}: {r.cpu_us_per_token:.1f} µs/token "
            f"({mark} vs the {limit:g} µs target)"
        )
    return lines


def print_notes(args: argparse.Namespace, results: list[Result]) -> None:
    print("µs/req = µs/token × 256 (request set-up amortised in). achieved/offered in tok/s;")
    print("kept up = achieved ≥ 95% of offered. cores: CPU-seconds per second in the window")
    print("(client = its process tree; one asyncio process saturates at ~1.0).")
    paced_1024 = any(r.spec.mode == "paced" and r.spec.concurrency >= 1024 for r in results)
    if paced_1024 and args.interval_ms_1024 != args.interval_ms:
        print(
            f"NOTE: paced at ≥1024 streams was SCALED to {args.interval_ms_1024:g} ms per token "
            f"({1024 * 1000 / args.interval_ms_1024:.0f} tok/s offered), not "
            f"{args.interval_ms:g} ms."
        )
    elif paced_1024:
        print(
            f"NOTE: paced 1024 × {args.interval_ms:g} ms = {1024 * 1000 / args.interval_ms:.0f} "
            "tok/s offered: on 2 shared cores one client process saturates near there (see "
            "'saturation'); --interval-ms-1024 50 gives an unsaturated 20k tok/s comparison."
        )
    if args.no_vllm:
        print("NOTE: vllm bench serve comparison SKIPPED (--no-vllm).")
    for line in saturation_notes(results):
        print("saturation:", line)
