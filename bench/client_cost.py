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

- Sanity checks (``loadgen.sanity``): ``--sanity both`` runs soaktop's driver with the
  per-response checks on and off, alternately, and prints both rows and their difference
  (the server sends a varied 512-token vocabulary, so the repetition check does its real
  work); ``on`` (the default, as the product runs) or ``off`` runs one.

Usage:  .venv/bin/python bench/client_cost.py [--quick] [--concurrency 64,256] [--no-vllm]
        [--sanity on|off|both]
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
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from cost_figures import (
    OUTPUT_LEN,
    SAMPLE_S,
    Result,
    Spec,
    analyse,
    median_run,
    print_notes,
    print_table,
    targets,
)

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SOAKTOP_CACHE") or Path.home() / ".cache" / "soaktop")
TOKENIZER_DIR = CACHE / "tiny-model-v1"
"""`vllm bench serve` needs a tokenizer: the tiny test model's (scripts/build_tiny_model.py)."""
INPUT_LEN = 32


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


# ---------------------------------------------------------------------------- clients


def run_soaktop(
    spec: Spec,
    server: FastServer,
    work: Path,
    attempt: int = 0,
    asyncio_loop: bool = False,
    sanity: bool = True,
) -> Result:
    on = "on" if sanity else "off"
    out = work / f"soaktop-{spec.mode}-{spec.concurrency}-{on}-{attempt}"
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
    if not sanity:
        cmd.append("--no-sanity")
    res = Result(spec, "soaktop", shlex.join(cmd), sanity=sanity)
    rc, samples, res.wall_s = sample_run(cmd, dict(os.environ), server, out / "log.txt", 600)
    if rc != 0 or not (out / "summary.json").exists():
        res.error = f"driver exit {rc}: {tail(out / 'log.txt')}"
        return res
    summary = json.loads((out / "summary.json").read_text())
    res.ok, res.requests = summary["ok"], summary["requests"]
    res.ttft_p50_ms = summary["median_ttft_ms"]
    if summary["failures"]:
        res.notes.append(f"failures: {summary['failures']}")
    if summary.get("sanity_flagged"):
        res.notes.append(f"{summary['sanity_flagged']} responses sanity-flagged")
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


def parse_args() -> argparse.Namespace:
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
        "--sanity",
        choices=["on", "off", "both"],
        default="on",
        help="soaktop's per-response sanity checks: on (as the product runs), off, or both "
        "(alternate runs, both rows and their difference)",
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
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    return args


def print_header(args: argparse.Namespace) -> Path | None:
    """The machine, and the vLLM venv (built when the comparison runs)."""
    print("=" * 100)
    print("soaktop client-cost bench —", time.strftime("%Y-%m-%d %H:%M:%S"), f"— {os.uname()[1]}")
    print(
        f"machine: {psutil.cpu_count()} cores (client and server share them), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB; python {sys.version.split()[0]}"
    )
    if args.no_vllm:
        print("!" * 100)
        print("!!! --no-vllm: the `vllm bench serve` comparison was SKIPPED — soaktop figures only")
        print("!" * 100)
        return None
    t = time.time()
    venv = vllm_venv()
    ensure_tokenizer(venv)
    print(f"vLLM venv: {venv} (ready in {time.time() - t:.0f} s); tokenizer: {TOKENIZER_DIR}")
    return venv


def spec_for(args: argparse.Namespace, mode: str, conc: int) -> Spec:
    if mode == "paced":
        interval = args.interval_ms_1024 if conc >= 1024 else args.interval_ms
        rounds = 1 if args.quick or conc >= 1024 else 2
        return Spec(mode, conc, interval, conc * rounds)
    per = 2 if args.quick else 4
    return Spec(mode, conc, 0.0, max(conc * per, 512 if args.quick else 1024))


def run_cell(
    args: argparse.Namespace, spec: Spec, work: Path, venv: Path | None, servers: list[str]
) -> list[Result]:
    """One (pacing, concurrency) cell: soaktop (per sanity setting, alternating runs,
    the median of each) and, unless skipped, vllm bench serve — on one fresh server."""
    settings = {"on": [True], "off": [False], "both": [True, False]}[args.sanity]
    server = FastServer(spec.interval_ms)
    servers.append(shlex.join(server.cmd))
    out: list[Result] = []
    try:
        print(
            f"... {spec.mode} {spec.concurrency} streams, {spec.num_requests} requests", flush=True
        )
        runs: dict[bool, list[Result]] = {on: [] for on in settings}
        for i in range(args.repeat):
            for on in settings:
                runs[on].append(run_soaktop(spec, server, work, i, args.driver_asyncio_loop, on))
        for on in settings:
            res = median_run(runs[on])
            if args.sanity != "both":
                res.sanity = None  # one setting: the plain "soaktop" row
                res.notes.append(f"sanity checks {'on' if on else 'OFF'}")
            out.append(res)
        if venv is not None:
            out.append(run_vllm(spec, server, work, venv))
    finally:
        server.stop()
    return out


def main() -> None:
    args = parse_args()
    if args.runner_rss:
        try:
            sys.exit(measure_runner_rss(1024))
        except NotImplementedError as exc:
            sys.exit(f"--runner-rss: {exc} (hook: bench/client_cost.py measure_runner_rss)")
    if args.interval_ms_1024 is None:
        args.interval_ms_1024 = args.interval_ms
    t_begin = time.time()
    venv = print_header(args)
    work = Path(tempfile.mkdtemp(prefix="soaktop-bench-"))
    results: list[Result] = []
    servers: list[str] = []
    for mode in (m for m in args.modes.split(",") if m):
        for conc in (int(c) for c in args.concurrency.split(",") if c):
            results += run_cell(args, spec_for(args, mode, conc), work, venv, servers)
    print()
    print(
        f"Client CPU per streamed token and per request ({OUTPUT_LEN} output tokens), "
        "steady-state window (10th–90th percentile token)"
    )
    print_table(results)
    print()
    print_notes(args, results)
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
        print(f"  {r.label} ({r.spec.mode} {r.spec.concurrency}): {r.cmd}")
    print(f"total bench time: {time.time() - t_begin:.0f} s")
    if args.keep:
        print(f"raw outputs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
