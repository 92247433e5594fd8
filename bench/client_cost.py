"""What does streaming cost the client? soaktop's StreamClient vs `vllm bench serve`.

Prints, per (pacing, concurrency, client): client CPU µs per streamed token and per request,
achieved vs offered tok/s (did the client keep up?), TTFT p50, the client's and the server's
CPU (cores) and the client's peak RSS; then PASS/MISS for the project's targets
(CLIENT_COST.md): ≤ 25 µs CPU per token paced at 256 streams, ≤ 7 µs unpaced.

Method
- Server: ``bench/fast_server.py`` in its own process (vLLM 0.32 byte format, pre-encoded).
  *paced*: every ``interval`` each active stream gets one token (one socket write — so one
  token per client read, as from a batching GPU server); *unpaced*: each response is
  written as fast as the server can, one write per event.
- Clients, each in its own process, closed-loop at ``--max-concurrency N``, 256 output
  tokens per request: (a) ``bench/stream_driver.py`` (StreamClient); (b) ``vllm bench serve``
  from the project's vLLM CPU venv (``scripts/vllm_cpu_env.sh``), same server, same run.
- CPU = user+sys of the client's process tree (psutil, sampled every 0.1 s). Both clients
  report every token's arrival time (``perf_counter`` = CLOCK_MONOTONIC, shared with the
  bench); the steady-state window runs from the 10th to the 90th percentile token, so
  start-up (imports, tokenizer, connection set-up) and the tail are left out identically
  for both. µs/token = window CPU ÷ window tokens; µs/request = µs/token × output tokens
  (request set-up amortised in).

Usage:  .venv/bin/python bench/client_cost.py [--quick] [--concurrency 64,256] [--no-vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SOAKTOP_CACHE") or Path.home() / ".cache" / "soaktop")
TOKENIZER_DIR = CACHE / "tiny-model-v1"
"""`vllm bench serve` needs a tokenizer: the tiny test model's (scripts/build_tiny_model.py)."""
OUTPUT_LEN = 256
INPUT_LEN = 32
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
    def cpu_us_per_request(self) -> float:
        return self.cpu_us_per_token * OUTPUT_LEN

    @property
    def kept_up(self) -> bool | None:
        offered = self.spec.offered_tok_s
        if offered is None or self.achieved_tok_s != self.achieved_tok_s:
            return None
        return self.achieved_tok_s >= 0.95 * offered


# ---------------------------------------------------------------------------- processes


def tree_cpu_rss(proc: psutil.Process) -> tuple[float, float]:
    """user+sys seconds and RSS bytes of a process and its live descendants."""
    cpu = rss = 0.0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return cpu, rss
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss
        except psutil.Error:
            pass
    return cpu, rss


def machine_busy() -> float:
    """CPU-seconds all processes on the machine have used (to spot concurrent load)."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    guest = getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)  # already in user/nice
    return float(sum(t) - idle - guest)


_SELF = psutil.Process()


def self_cpu() -> float:
    t = _SELF.cpu_times()
    return t.user + t.system


class FastServer:
    def __init__(self, interval_ms: float) -> None:
        self.cmd = [
            sys.executable,
            str(REPO / "bench" / "fast_server.py"),
            "--port",
            "0",
            "--token-interval-ms",
            f"{interval_ms:g}",
        ]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"fast_server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sample_run(
    cmd: list[str], env: dict[str, str], server: FastServer, log: Path, timeout_s: float
) -> tuple[int, np.ndarray, float]:
    """Run a client to completion, sampling (t, client cpu, client rss, server cpu)."""
    with log.open("w") as out:
        t_start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        ps = psutil.Process(proc.pid)
        rows: list[tuple[float, ...]] = []
        while proc.poll() is None:
            cpu, rss = tree_cpu_rss(ps)
            rows.append((time.perf_counter(), cpu, rss, server.cpu(), machine_busy(), self_cpu()))
            if time.perf_counter() - t_start > timeout_s:
                proc.kill()
                proc.wait()
                break
            time.sleep(SAMPLE_S)
        rc = proc.wait()
    return rc, np.asarray(rows, dtype=np.float64), time.perf_counter() - t_start


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


# ---------------------------------------------------------------------------- clients


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


def run_soaktop(
    spec: Spec, server: FastServer, work: Path, attempt: int = 0, asyncio_loop: bool = False
) -> Result:
    out = work / f"soaktop-{spec.mode}-{spec.concurrency}-{attempt}"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        str(REPO / "bench" / "stream_driver.py"),
        "--url",
        server.url,
        "--endpoint",
        "/v1/completions",
        "--concurrency",
        str(spec.concurrency),
        "--num-requests",
        str(spec.num_requests),
        "--input-len",
        str(INPUT_LEN),
        "--output-len",
        str(OUTPUT_LEN),
        "--out",
        str(out),
    ]
    if asyncio_loop:
        cmd.append("--asyncio-loop")
    res = Result(spec, "soaktop", shlex.join(cmd))
    rc, samples, res.wall_s = sample_run(cmd, dict(os.environ), server, out / "log.txt", 600)
    if rc != 0 or not (out / "summary.json").exists():
        res.error = f"driver exit {rc}: {tail(out / 'log.txt')}"
        return res
    summary = json.loads((out / "summary.json").read_text())
    res.ok, res.requests = summary["ok"], summary["requests"]
    res.ttft_p50_ms = summary["median_ttft_ms"]
    if summary["failures"]:
        res.notes.append(f"failures: {summary['failures']}")
    times = np.fromfile(out / "token_times_ns.i64", dtype=np.int64).astype(np.float64) / 1e9
    analyse(res, samples, times)
    return res


def run_vllm(spec: Spec, server: FastServer, work: Path, venv: Path) -> Result:
    out = work / f"vllm-{spec.mode}-{spec.concurrency}"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(venv / "bin" / "python"),
        "-m",
        "vllm.entrypoints.cli.main",
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        server.url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "tiny",
        "--tokenizer",
        str(TOKENIZER_DIR),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(INPUT_LEN),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--ignore-eos",
        "--max-concurrency",
        str(spec.concurrency),
        "--num-prompts",
        str(spec.num_requests),
        "--request-rate",
        "inf",
        "--percentile-metrics",
        "ttft",
        "--metric-percentiles",
        "50",
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out),
        "--result-filename",
        "result.json",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    res = Result(spec, "vllm", "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 " + shlex.join(cmd))
    rc, samples, res.wall_s = sample_run(cmd, env, server, out / "log.txt", 600)
    path = out / "result.json"
    if rc != 0 or not path.exists():
        res.error = f"vllm bench serve exit {rc}: {tail(out / 'log.txt')}"
        return res
    data = json.loads(path.read_text())
    res.ok = int(data["completed"])
    res.requests = res.ok + int(data.get("failed", 0))
    res.ttft_p50_ms = float(data["median_ttft_ms"])
    chunks: list[np.ndarray] = []
    for start, ttft, itl in zip(data["start_times"], data["ttfts"], data["itls"], strict=False):
        if not ttft:
            continue
        arr = np.empty(len(itl) + 1)
        arr[0] = start + ttft
        arr[1:] = itl
        chunks.append(np.cumsum(arr))
    analyse(res, samples, np.concatenate(chunks) if chunks else np.empty(0))
    return res


def tail(path: Path, n: int = 400) -> str:
    try:
        return path.read_text(errors="replace")[-n:].replace("\n", " | ")
    except OSError:
        return "<no log>"


# ---------------------------------------------------------------------------- setup


def vllm_venv() -> Path:
    """The project's cached vLLM CPU venv (built on first use, ~2 minutes)."""
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "vllm_cpu_env.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def ensure_tokenizer(venv: Path) -> None:
    """Build (or find cached) the tiny model, whose directory holds the tokenizer."""
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            str(REPO / "scripts" / "build_tiny_model.py"),
            str(TOKENIZER_DIR),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def measure_runner_rss(concurrency: int = 1024, **options: Any) -> int:
    """HOOK for the full-runner measurement (the lead's): peak RSS of the real soaktop
    runner at ``concurrency`` streams. Delegates to ``bench/runner_memory.py`` when that
    script exists; a client-CPU figure for the whole runner could reuse ``sample_run`` and
    ``analyse`` here (token times from the runner's journal). Returns the exit status."""
    script = REPO / "bench" / "runner_memory.py"
    if not script.exists():
        raise NotImplementedError("full-runner RSS measurement is not built yet")
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    cmd = [sys.executable, str(script), "--concurrency", str(concurrency), *extra]
    print("runner RSS: " + shlex.join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, check=False).returncode


# ---------------------------------------------------------------------------- report


def fmt(x: float | None, spec: str = ".1f") -> str:
    if x is None or x != x:
        return "—"
    return format(x, spec)


def print_table(results: list[Result]) -> None:
    head = (
        f"{'pacing':<14} {'conc':>5} {'client':<8} {'µs/tok':>7} {'µs/req':>8} "
        f"{'achieved':>9} {'offered':>8} {'kept up':>7} {'TTFT p50':>9} "
        f"{'cli cores':>9} {'srv cores':>9} {'peak RSS':>9} {'ok/req':>11}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        s = r.spec
        pacing = f"paced {s.interval_ms:g} ms" if s.mode == "paced" else "unpaced"
        if r.error:
            print(f"{pacing:<14} {s.concurrency:>5} {r.client:<8} ERROR: {r.error}")
            continue
        kept = {True: "yes", False: "NO", None: "—"}[r.kept_up]
        offered = fmt(s.offered_tok_s, ".0f")
        print(
            f"{pacing:<14} {s.concurrency:>5} {r.client:<8} {fmt(r.cpu_us_per_token):>7} "
            f"{fmt(r.cpu_us_per_request, '.0f'):>8} {fmt(r.achieved_tok_s, '.0f'):>9} "
            f"{offered:>8} {kept:>7} {fmt(r.ttft_p50_ms):>6} ms "
            f"{fmt(r.client_cores, '.2f'):>9} {fmt(r.server_cores, '.2f'):>9} "
            f"{fmt(r.peak_rss_mb, '.0f'):>6} MB {r.ok:>5}/{r.requests:<5}"
        )
        for note in r.notes:
            print(f"{'':<14} {'':>5} {'':<8} note: {note}")


def saturation_notes(results: list[Result]) -> list[str]:
    notes = []
    for r in results:
        if r.error:
            continue
        s = r.spec
        where = f"{s.mode} {s.concurrency} ({r.client})"
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


def targets(results: list[Result]) -> list[str]:
    lines = []
    ours = {(r.spec.mode, r.spec.concurrency): r for r in results if r.client == "soaktop"}
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="64,256,1024", help="comma-separated")
    ap.add_argument("--modes", default="paced,unpaced")
    ap.add_argument("--quick", action="store_true", help="one paced round, fewer requests")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vllm bench serve side")
    ap.add_argument("--interval-ms", type=float, default=20.0, help="paced: ms per token")
    ap.add_argument(
        "--interval-ms-1024",
        type=float,
        default=None,
        help="paced interval at ≥1024 streams (default: --interval-ms). 1,024 × 20 ms = "
        "51k tok/s saturates one client core on 2 shared cores; 50 gives 20k tok/s",
    )
    ap.add_argument(
        "--driver-asyncio-loop",
        action="store_true",
        help="informational: run soaktop's driver on asyncio's own loop instead of uvloop "
        "(the runner's default when uvloop is installed)",
    )
    ap.add_argument(
        "--runner-rss",
        action="store_true",
        help="measure the full soaktop runner's RSS at 1,024 streams instead "
        "(hook: delegates to bench/runner_memory.py)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the raw outputs (printed path)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="soaktop runs per cell, the median shown (default 3; 1 with --quick): this "
        "machine is shared, single runs scatter by ±15%%",
    )
    args = ap.parse_args()
    if args.runner_rss:
        try:
            sys.exit(measure_runner_rss(1024))
        except NotImplementedError as exc:
            sys.exit(f"--runner-rss: {exc} (hook: bench/client_cost.py measure_runner_rss)")
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    concs = [int(c) for c in args.concurrency.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]
    t_begin = time.time()

    print("=" * 100)
    print("soaktop client-cost bench —", time.strftime("%Y-%m-%d %H:%M:%S"), f"— {os.uname()[1]}")
    print(
        f"machine: {psutil.cpu_count()} cores (client and server share them), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB; python {sys.version.split()[0]}"
    )
    venv: Path | None = None
    if args.no_vllm:
        print("!" * 100)
        print("!!! --no-vllm: the `vllm bench serve` comparison was SKIPPED — soaktop figures only")
        print("!" * 100)
    else:
        t = time.time()
        venv = vllm_venv()
        ensure_tokenizer(venv)
        print(f"vLLM venv: {venv} (ready in {time.time() - t:.0f} s); tokenizer: {TOKENIZER_DIR}")

    work = Path(tempfile.mkdtemp(prefix="soaktop-bench-"))
    results: list[Result] = []
    servers: list[str] = []
    interval_1024 = args.interval_ms_1024 if args.interval_ms_1024 is not None else args.interval_ms
    for mode in modes:
        for conc in concs:
            if mode == "paced":
                interval = interval_1024 if conc >= 1024 else args.interval_ms
                rounds = 1 if args.quick or conc >= 1024 else 2
                spec = Spec(mode, conc, interval, conc * rounds)
            else:
                per = 2 if args.quick else 4
                spec = Spec(mode, conc, 0.0, max(conc * per, 512 if args.quick else 1024))
            server = FastServer(spec.interval_ms)
            servers.append(shlex.join(server.cmd))
            try:
                print(f"... {mode} {conc} streams, {spec.num_requests} requests", flush=True)
                runs = [
                    run_soaktop(spec, server, work, i, args.driver_asyncio_loop)
                    for i in range(args.repeat)
                ]
                results.append(median_run(runs))
                if venv is not None:
                    results.append(run_vllm(spec, server, work, venv))
            finally:
                server.stop()

    print()
    print(
        f"Client CPU per streamed token and per request ({OUTPUT_LEN} output tokens), "
        "steady-state window (10th–90th percentile token)"
    )
    print_table(results)
    print()
    print("µs/req = µs/token × 256 (request set-up amortised in). achieved/offered in tok/s;")
    print("kept up = achieved ≥ 95% of offered. cores: CPU-seconds per second in the window")
    print("(client = its process tree; one asyncio process saturates at ~1.0).")
    paced_1024 = any(r.spec.mode == "paced" and r.spec.concurrency >= 1024 for r in results)
    if paced_1024 and interval_1024 != args.interval_ms:
        print(
            f"NOTE: paced at ≥1024 streams was SCALED to {interval_1024:g} ms per token "
            f"({1024 * 1000 / interval_1024:.0f} tok/s offered), not {args.interval_ms:g} ms."
        )
    elif paced_1024:
        print(
            f"NOTE: paced 1024 × {interval_1024:g} ms = {1024 * 1000 / interval_1024:.0f} tok/s "
            "offered: on 2 shared cores one client process saturates near there (see "
            "'saturation'); --interval-ms-1024 50 gives an unsaturated 20k tok/s comparison."
        )
    if args.no_vllm:
        print("NOTE: vllm bench serve comparison SKIPPED (--no-vllm).")
    for line in saturation_notes(results):
        print("saturation:", line)
    print()
    print("Targets (soaktop StreamClient, CLIENT_COST.md):")
    for line in targets(results):
        print("  " + line)
    print()
    print("Commands used:")
    print("  bench: " + shlex.join([sys.executable, *sys.argv]))
    for cmd in dict.fromkeys(servers):
        print("  server: " + cmd.replace(str(REPO) + "/", ""))
    for r in results:
        print(f"  {r.client} ({r.spec.mode} {r.spec.concurrency}): {r.cmd}")
    print(f"total bench time: {time.time() - t_begin:.0f} s")
    if args.keep:
        print(f"raw outputs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
