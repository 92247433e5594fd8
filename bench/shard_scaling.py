"""Do shards carry more than one process? (issue 17 §4)

Not a test: a benchmark that prints its figures side by side. Each row is a whole
``soaktop run --headless --shards N`` (gates off, NVML off) against ``bench/fast_server.py``
paced at one token per stream every ``--interval-ms`` (20 ms: 50 tok/s a stream), a closed
loop of ``--max-tokens`` (256) tokens a request, for ``--seconds`` each:

- a light baseline (64 streams, 1 shard): the TTFT every other row is compared with;
- ``--streams`` (1,024 and 4,096) × ``--shards`` (1, 2 and 4);
- ``--many`` (10,000) long-lived streams at 1 token/s each (their own server paced at
  1,000 ms; ``--many-tokens`` 60 a request, ``--many-seconds`` 75), one host, 1 shard and
  2: barrier reached, run valid, runner RSS per stream. Their server ends each answer at
  its EOS up to ``--many-spread`` (half) short of ``max_tokens``, as a model's answers
  vary: answers of one length against one ticker would keep the closed loop in lockstep,
  every turnover one burst of 10,000 request ends and sends, a load no real soak makes.

Per row: offered vs achieved tok/s (what the client received: every token's arrival time,
from the journal's TTFT and inter-token gaps, counted over the issue window's last three
quarters, the steady state; a client that falls behind reads the server's writes late,
and its rate is its own, whatever the server wrote), the server's own count of tokens
written over the same stretch (``served``: below offered, the server was the one behind),
client CPU µs per token
(the whole soaktop process tree: coordinator and shards, from ``RUSAGE_CHILDREN``; the
server is not in it), loop lag p99 (the worst of the coordinator's and every shard's),
TTFT p50 and its inflation over the baseline, ITL p50 against the pacing, the behind share
(``client_health.behind_fraction``), the peak RSS of the tree, the verdict and its reasons.

The last part times a merge and ``verify`` of a 1-hour, 4-shard run: a real 4-shard run's
journal is stretched to 3,600 s at that run's own rate (its lines repeated back to back
with their times shifted, shard fields kept), ``soaktop recover`` rebuilds the record from it,
and ``soaktop verify`` recomputes and checks every figure; both walls are printed.

The server shares the machine's cores with the client: print the core count with the
figures and say what they cannot show (on 2 cores, 2 shards and the server compete for the
same 2 cores, so shards cannot add capacity there; a machine with spare cores can).

``--cpu-per-shard 0.25`` caps each measuring process (the runner with 1 shard, each shard
with more) at a quarter of a CPU, as root with cgroup v1: a core of its own for each
shard where the machine has too few (``bench/cpu_caps.py`` says what that can and cannot
show). On 2 cores a quarter is about the most that leaves room: two capped shards once
behind carry ~90k tok/s, about what one server process can write. ``--server-procs N``
runs the server as N processes on one port (a machine with spare cores needs more than
one: ``bench/device_check.sh`` gives it 6).

Run: ``.venv/bin/python bench/shard_scaling.py`` (about 6 minutes; ``--quick`` for a
2-minute look: 1,024 streams only, 1 and 2 shards, 8 s rows, 1,000 many-streams, and a
10-minute stretched journal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil
from cpu_caps import ShardCaps, unavailable

REPO = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).with_name("soaktop")
SOAKTOP = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "soak"]
"""The installed ``soaktop``, else the checkout's own (a lent GPU machine runs the tree
with its packages on PYTHONPATH, nothing installed: ``bench/device_check.sh``)."""
BEHIND_MIN_SAMPLES = 50
"""Sampled reads below which a row's behind share is not shown."""
TIME_FIELDS = ("sent_s", "end_s", "intended_s")
"""A journal line's instants (seconds from the run's origin); the rest are durations."""


@dataclass
class Row:
    """One ``soaktop run`` and what it measured."""

    streams: int
    shards: int
    interval_ms: float
    offered_tok_s: float
    achieved_tok_s: float | None = None
    served_tok_s: float | None = None
    cpu_s: float | None = None
    cpu_us_per_tok: float | None = None
    lag_p99_s: float | None = None
    ttft_p50_s: float | None = None
    itl_p50_s: float | None = None
    behind: float | None = None
    peak_rss_mb: float = 0.0
    barrier: bool = False
    verdict: str = "?"
    reasons: list[str] = field(default_factory=list)
    run_dir: Path | None = None
    caps: str = ""


def start_server(
    interval_ms: float, length_spread: float = 0.0, procs: int = 1
) -> tuple[subprocess.Popen[str], str]:
    """``bench/fast_server.py`` (``procs`` processes on one port) on a free loopback port;
    it and its URL."""
    srv = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "fast_server.py"), "--port", "0",
         "--token-interval-ms", f"{interval_ms:g}", "--length-spread", f"{length_spread:g}",
         "--procs", str(procs)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert srv.stdout is not None
    line = srv.stdout.readline()
    if not line.startswith("READY "):
        srv.kill()
        raise SystemExit(f"fast_server did not start: {line!r}")
    return srv, f"http://127.0.0.1:{int(line.split()[1])}"


class ServerRate:
    """The fast server's own count of tokens written, polled four times a second against
    the wall clock: what it wrote over any stretch of the run (:meth:`rate`)."""

    def __init__(self, url: str) -> None:
        self.samples: list[tuple[float, int]] = []  # (wall time, tokens written so far)
        self._url = f"{url}/bench/stats"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            try:
                with urllib.request.urlopen(self._url, timeout=2) as r:
                    st = json.loads(r.read())
            except OSError:
                continue
            self.samples.append((time.time(), st["tokens"]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def rate(self, start: float, end: float) -> float | None:
        """Tokens a second written between two wall times (the count interpolated between
        the polls either side of each); None when the polls do not cover the stretch."""
        if len(self.samples) < 2 or not self.samples[0][0] <= start < end <= self.samples[-1][0]:
            return None
        t, n = zip(*self.samples, strict=True)
        return float((np.interp(end, t, n) - np.interp(start, t, n)) / (end - start))


def received_rate(run_dir: Path) -> tuple[float, float, float] | None:
    """The client's received tokens a second over the issue window's last three quarters
    (every token's arrival: sent + TTFT, then each inter-token gap), and that stretch's
    wall-clock start and end; None without a journal or an issue window."""
    events = [orjson.loads(x) for x in (run_dir / "events.jsonl").read_bytes().splitlines()]
    phases = {e["data"].get("phase"): e for e in events if e.get("kind") == "phase"}
    if "load" not in phases or "drain" not in phases:
        return None
    load_t, end = phases["load"]["t"], phases["drain"]["t"]
    start = load_t + (end - load_t) / 4
    count = 0.0
    for line in (run_dir / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if not isinstance(r, dict) or r.get("phase") != "load":
            continue
        if r.get("ttft_s") is None or not r.get("chunks"):  # no token came
            continue
        at = r["sent_s"] + r["ttft_s"] + np.cumsum([0, *(r.get("itl_us") or ())]) / 1e6
        inside = int(np.count_nonzero((at >= start) & (at < end)))
        count += inside * (r.get("output_tokens") or r["chunks"]) / r["chunks"]
    origin = _wall(phases["load"]["wall"]) - load_t
    return count / (end - start), origin + start, origin + end


def _wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


class TreeRss:
    """The peak RSS of a process and its descendants, sampled twice a second."""

    def __init__(self, pid: int) -> None:
        self.peak_mb = 0.0
        self._pid = pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            try:
                root = psutil.Process(self._pid)
                procs = [root, *root.children(recursive=True)]
                rss = 0
                for p in procs:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        continue
            except psutil.Error:
                return
            self.peak_mb = max(self.peak_mb, rss / 1e6)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def run_soaktop(
    url: str,
    out: Path,
    streams: int,
    shards: int,
    seconds: float,
    tokens: int,
    interval_ms: float,
    cpu_share: float | None = None,
) -> Row:
    """One headless run; its row, from the record and the process tree's CPU (``cpu_share``:
    each measuring process capped at that share of one CPU, :mod:`cpu_caps`)."""
    row = Row(streams, shards, interval_ms, streams * 1000.0 / interval_ms)
    drain_s = tokens * interval_ms / 1000 + 30  # outlasts the longest request: no cut drain
    argv = [
        *SOAKTOP, "run", "--endpoint", url, "--model", "tiny", "--headless", "--no-gates",
        "--no-nvml", "--concurrency", str(streams), "--shards", str(shards),
        "--duration", f"{seconds:g}", "--max-tokens", str(tokens), "--ignore-eos",
        "--out", str(out), "--drain-timeout", f"{drain_s:g}",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rss, served = TreeRss(proc.pid), ServerRate(url)
    caps = ShardCaps(proc.pid, shards, cpu_share) if cpu_share else None
    try:
        log, _ = proc.communicate(timeout=seconds + 300)
    finally:
        if caps is not None:
            caps.stop()
            row.caps = caps.summary()
            caps.remove()
    row.peak_rss_mb = rss.stop()
    served.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    records = sorted(out.glob("*/record.json"), key=lambda p: p.stat().st_mtime)
    if not records:
        row.verdict = f"no record (exit {proc.returncode}): {log.strip().splitlines()[-1:]}"
        return row
    row.run_dir = records[-1].parent
    _fill(row, json.loads(records[-1].read_text()), cpu_s)
    received = received_rate(row.run_dir)
    if received is not None:
        row.achieved_tok_s = received[0]
        row.served_tok_s = served.rate(received[1], received[2])
    return row


def _fill(row: Row, rec: dict[str, Any], cpu_s: float) -> None:
    load, health = rec.get("load") or {}, rec.get("client_health") or {}
    row.verdict = rec["status"]
    row.reasons = [r["code"] for r in rec["reasons"] if r.get("severity") != "note"]
    row.barrier = bool(load.get("barrier_released"))
    tokens = load.get("output_tokens") or 0
    row.cpu_s = cpu_s
    row.cpu_us_per_tok = cpu_s / tokens * 1e6 if tokens else None
    lags = [health.get("loop_lag_p99_s")]
    lags += [s.get("loop_lag_p99_s") for s in rec.get("shards") or []]
    row.lag_p99_s = max((x for x in lags if x is not None), default=None)
    row.ttft_p50_s = (load.get("ttft_s") or {}).get("p50")
    row.itl_p50_s = (load.get("itl_s") or {}).get("p50")
    # A share of a handful of samples says nothing (a 1-token/s row of short answers
    # samples a few reads a run): shown only from BEHIND_MIN_SAMPLES on.
    if (health.get("behind_samples") or 0) >= BEHIND_MIN_SAMPLES:
        row.behind = health.get("behind_fraction")


def _f(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def print_rows(rows: list[Row], base_ttft: float | None) -> None:
    head = (
        f"{'streams':>7} {'shards':>6} {'offered':>9} {'served':>9} {'achieved':>9} {'ratio':>6} "
        f"{'µs/tok':>7} {'lag p99':>8} {'TTFT p50':>9} {'infl':>6} {'ITL p50':>8} "
        f"{'behind':>7} {'RSS MB':>7} {'KB/str':>7}  verdict"
    )
    print(head)
    for r in rows:
        ratio = r.achieved_tok_s / r.offered_tok_s if r.achieved_tok_s else None
        infl = r.ttft_p50_s / base_ttft if r.ttft_p50_s and base_ttft else None
        why = f"{r.verdict} {','.join(r.reasons)}".strip()
        print(
            f"{r.streams:>7,} {r.shards:>6} {r.offered_tok_s:>9,.0f} "
            f"{_f(r.served_tok_s, ',.0f'):>9} "
            f"{_f(r.achieved_tok_s, ',.0f'):>9} {_f(ratio, '.2f'):>6} "
            f"{_f(r.cpu_us_per_tok, '.1f'):>7} {_f(r.lag_p99_s, '.3f'):>8} "
            f"{_f(r.ttft_p50_s, '.3f'):>9} {_f(infl, '.1f'):>6} {_f(r.itl_p50_s, '.3f'):>8} "
            f"{'—' if r.behind is None else format(r.behind * 100, '.1f') + '%':>7} "
            f"{r.peak_rss_mb:>7.0f} {r.peak_rss_mb * 1e3 / r.streams:>7.1f}  {why}"
        )
    for r in rows:
        if r.caps:
            print(f"  {r.streams:,} × {r.shards}: {r.caps}")


def scaling(rows: list[Row]) -> list[str]:
    """Per stream count: the best multi-shard row's tok/s over the 1-shard row's."""
    lines = []
    for streams in sorted({r.streams for r in rows}):
        one = next((r for r in rows if r.streams == streams and r.shards == 1), None)
        for r in rows:
            if r.streams == streams and r.shards > 1 and one and one.achieved_tok_s:
                x = (r.achieved_tok_s or 0) / one.achieved_tok_s
                cpu = ""
                if r.cpu_s and one.cpu_s:  # the whole tree's: coordinator and shards
                    cpu = f" on {r.cpu_s / one.cpu_s:.2f}× the client CPU"
                lines.append(
                    f"{streams:,} streams: {r.shards} shards carry {x:.2f}× the tok/s of 1{cpu} "
                    f"(target at the load where one falls behind: ≥1.6× for 2 shards)"
                )
    return lines


def stretch_journal(src: Path, dst: Path, seconds: float) -> tuple[int, float]:
    """Write ``dst`` as ``src``'s journal repeated back to back, each copy shifted by the
    journal's span, until it spans ``seconds`` (the real run's rate and shape, an hour
    long); the request lines written and the seconds added to the original span."""
    lines = [orjson.loads(x) for x in src.read_bytes().splitlines() if x.strip()]
    reqs = [x for x in lines if isinstance(x, dict) and "sent_s" in x]
    others = [x for x in lines if not (isinstance(x, dict) and "sent_s" in x)]
    if not reqs:
        raise SystemExit(f"{src}: no request lines to stretch")
    t0 = min(x["sent_s"] for x in reqs)
    span = max(x.get("end_s") or x["sent_s"] for x in reqs) - t0 + 0.001
    copies = max(1, math.ceil(seconds / span))
    with dst.open("wb") as f:
        for x in others:
            f.write(orjson.dumps(x) + b"\n")
        for copy in range(copies):
            shift = copy * span
            for x in reqs:
                y = dict(x)
                for k in TIME_FIELDS:
                    if y.get(k) is not None:
                        y[k] += shift
                if "id" in y:
                    y["id"] = f"{y['id']}-{copy}"
                f.write(orjson.dumps(y) + b"\n")
    return copies * len(reqs), (copies - 1) * span


def stretch_events(src: Path, dst: Path, by_s: float) -> None:
    """``src``'s events with the issue window's end and everything after it moved
    ``by_s`` later, so the stretched requests lie inside the window they claim."""
    lines = [orjson.loads(x) for x in src.read_bytes().splitlines() if x.strip()]
    drain = next(
        (e["t"] for e in lines if e.get("kind") == "phase" and e["data"].get("phase") == "drain"),
        None,
    )
    with dst.open("wb") as f:
        for e in lines:
            if drain is not None and e.get("t", 0.0) >= drain:
                e = {**e, "t": e["t"] + by_s}
            f.write(orjson.dumps(e) + b"\n")


def merge_and_verify(run_dir: Path, seconds: float, keep: Path | None = None) -> None:
    """Time ``soaktop recover`` and ``soaktop verify`` on ``run_dir`` stretched (``keep``:
    the stretched run directory is left there, to time other trees on the same files)."""
    with tempfile.TemporaryDirectory(prefix="soaktop-bench-hour-") as tmp:
        work = (keep if keep is not None else Path(tmp)) / run_dir.name
        shutil.copytree(run_dir, work)
        t0 = time.perf_counter()
        n, added_s = stretch_journal(run_dir / "requests.jsonl", work / "requests.jsonl", seconds)
        stretch_events(run_dir / "events.jsonl", work / "events.jsonl", added_s)
        size = (work / "requests.jsonl").stat().st_size / 1e6
        print(
            f"stretched journal: {n:,} requests over {seconds:,.0f} s "
            f"({n / seconds:,.0f} req/s, the real run's rate) from "
            f"{len(json.loads((run_dir / 'record.json').read_text()).get('shards') or [])} "
            f"shards, {size:,.0f} MB (written in {time.perf_counter() - t0:.1f} s)"
        )
        (work / "record.json").unlink()
        for cmd in ("recover", "verify"):
            t0 = time.perf_counter()
            out = subprocess.run([*SOAKTOP, cmd, str(work)], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            said = (out.stdout or out.stderr).strip().splitlines()
            print(f"  soaktop {cmd}: {wall:.1f} s (exit {out.returncode}) {said[:1]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--streams", default="1024,4096")
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--many", type=int, default=10_000)
    ap.add_argument("--many-tokens", type=int, default=60, help="a long-lived stream's tokens")
    ap.add_argument("--many-seconds", type=float, default=75.0)
    ap.add_argument(
        "--many-spread", type=float, default=0.5,
        help="the many-streams server's --length-spread (answers end up to this share short)",
    )  # fmt: skip
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--hour-seconds", type=float, default=3600.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--hour-only", action="store_true",
        help="only the merge + verify of the stretched 4-shard run (one 1,024-stream row first)",
    )  # fmt: skip
    ap.add_argument("--keep-hour", type=Path, help="leave the stretched run directory here")
    ap.add_argument(
        "--cpu-per-shard", type=float, metavar="SHARE",
        help="cap each measuring process at this share of one CPU (cgroup v1, root): a core "
        "of its own where the machine has too few (cpu_caps.py says what that can show)",
    )  # fmt: skip
    ap.add_argument(
        "--server-procs", type=int, default=1, metavar="N",
        help="fast_server processes (one core carries about 100k tok/s of one-token writes: "
        "on a machine with spare cores, give the server enough that it is not the limit)",
    )  # fmt: skip
    a = ap.parse_args()
    if a.cpu_per_shard is not None:
        why = unavailable()
        if why is not None or not 0.05 <= a.cpu_per_shard <= 1:
            raise SystemExit(f"--cpu-per-shard {a.cpu_per_shard:g}: {why or 'allowed 0.05-1'}")
    if a.hour_only:
        a.streams, a.shards = "1024", "4"
    if a.quick:
        a.seconds, a.streams, a.shards, a.many, a.hour_seconds = 8.0, "1024", "1,2", 1000, 600.0
        a.many_tokens, a.many_seconds = 8, 20.0
    cores = len(os.sched_getaffinity(0))
    print(
        f"cores: {cores} (the server runs on the same cores; {a.interval_ms:g} ms pacing, "
        f"{a.max_tokens} tokens a request, {a.seconds:g} s a row, {a.server_procs} server "
        f"process{'es' if a.server_procs > 1 else ''})"
    )
    if a.cpu_per_shard is not None:
        print(
            f"each measuring process capped at {a.cpu_per_shard:g} CPU (a stand-in for a core "
            f"of its own; the server, CLI, coordinator and parser uncapped)"
        )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="soaktop-bench-shards-") as tmp:
        srv, url = start_server(a.interval_ms, procs=a.server_procs)
        try:
            base = (
                None
                if a.hour_only
                else run_soaktop(url, Path(tmp) / "base", 64, 1, a.seconds, a.max_tokens,
                                 a.interval_ms, a.cpu_per_shard)
            )  # fmt: skip
            if base is not None:
                rows.append(base)
            for streams in (int(s) for s in a.streams.split(",")):
                for shards in (int(s) for s in a.shards.split(",")):
                    out = Path(tmp) / f"s{streams}x{shards}"
                    row = run_soaktop(url, out, streams, shards, a.seconds, a.max_tokens,
                                      a.interval_ms, a.cpu_per_shard)  # fmt: skip
                    rows.append(row)
                    print(f"  … {streams:,} × {shards}: {row.verdict}", flush=True)
        finally:
            srv.terminate()
            srv.wait()
        print_rows(rows, None if base is None else base.ttft_p50_s)
        if base is not None:
            for line in scaling(rows[1:]):
                print(line)
            if a.many > 0:  # --many 0: no long-lived rows
                many_streams(a, Path(tmp))
        four = next((r for r in rows if r.shards == max(x.shards for x in rows)), None)
        if four is not None and four.run_dir is not None and a.hour_seconds > 0:
            print(f"\nmerge + verify of a {a.hour_seconds / 3600:g}-hour, {four.shards}-shard run:")
            merge_and_verify(four.run_dir, a.hour_seconds, a.keep_hour)
    return 0


def many_streams(a: argparse.Namespace, tmp: Path) -> None:
    """The ``--many`` rows: long-lived streams at 1 token/s each, 1 shard and 2."""
    many_rows: list[Row] = []
    srv, url = start_server(1000.0, a.many_spread, a.server_procs)
    try:
        for shards in (1, 2):
            out = tmp / f"many{shards}"
            many_rows.append(
                run_soaktop(
                    url, out, a.many, shards, a.many_seconds, a.many_tokens, 1000.0, a.cpu_per_shard
                )
            )
    finally:
        srv.terminate()
        srv.wait()
    print(
        f"\n{a.many:,} streams at 1 token/s each (answers of "
        f"{math.ceil(a.many_tokens * (1 - a.many_spread))}–{a.many_tokens} tokens, "
        f"{a.many_seconds:g} s), one host:"
    )
    print_rows(many_rows, None)


if __name__ == "__main__":
    raise SystemExit(main())
