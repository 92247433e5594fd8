"""The cost of a record's load figures from its journal: one pass per slice vs one read.

Not a test: a benchmark that prints its figures. It writes a synthetic ``requests.jsonl``
(``--lines`` load lines with steps, workload classes and conversation turns, failures,
cancels, an open loop's intended times) into a temp dir, then measures, each in its own
process (so each peak RSS is its own), the record's load, steps, classes and turns:

- ``old``: as finalize and verify did before one read: one ``summarize_load`` per step,
  class and turn, plus a pass to count the classes' and one for the sessions;
- ``keeps``: one read (``summarize_slices``), every slice's ``keep`` called per line;
- ``one``: one read, each line routed to its slices by a look-up
  (:func:`soak.judge.load_pass.load_figures`, what finalize, verify and recover run).

    .venv/bin/python bench/finalize_cost.py [--lines 1000000] [--steps 20] [--turns 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from soak.judge.goodput import good_line, sweep_of
from soak.judge.load_pass import load_figures
from soak.record.class_figures import class_timing
from soak.record.journal import read_jsonl
from soak.record.models import LoadStep
from soak.record.step_figures import StepCounts, step_lines, step_timing
from soak.record.summary import LoadSlice, LoadTiming, summarize_load, summarize_slices

CLASSES = ["chat", "long", "json"]
RATE = 100.0  # requests/s: the journal spans lines / RATE seconds


def _config(turns: int) -> dict[str, Any]:
    return {
        "mix": {"classes": [{"name": n, "weight": 1.0} for n in CLASSES]},
        "turns": turns,
        "think_time_s": 0.0,
        "slo": "ttft<0.3s",
        "sweep": "rate=1,2",
        "percentile_method": "nearest-rank",
    }


def write_journal(path: Path, lines: int, n_steps: int, turns: int, tokens: int) -> None:
    """A synthetic open-loop journal: ``lines`` load lines at :data:`RATE` req/s."""
    rng = np.random.default_rng(1)
    span = lines / RATE
    ok = rng.random(lines) > 0.03
    cancelled = rng.random(lines) < 0.01
    ttft = rng.gamma(2.0, 0.08, lines)
    late = rng.exponential(0.01, lines)
    cls = rng.integers(0, len(CLASSES), lines)
    with path.open("wb") as fh:
        for i in range(lines):
            at = i / RATE
            sent = at + float(late[i])
            good = bool(ok[i] and not cancelled[i])
            ot = tokens if good else None
            e2e = float(ttft[i]) + 0.02 * tokens
            line = {
                "id": f"run/load/{i}",
                "phase": "load",
                "worker": i % 256,
                "prompt": i,
                "ok": good,
                "sent_s": sent,
                "end_s": sent + e2e,
                "ttfb_s": 0.005,
                "ttft_s": float(ttft[i]) if good else None,
                "first_content_s": float(ttft[i]) if good else None,
                "e2e_s": e2e if good else None,
                "status": 200 if good else 500,
                "failure": None if ok[i] else "http_5xx",
                "detail": None,
                "prompt_tokens": 200 if good else None,
                "output_tokens": ot,
                "chunks": ot or 0,
                "finish": "stop",
                "cancelled": bool(cancelled[i]),
                "stale_retry": False,
                "itl_us": [20000 + (i + k) % 997 for k in range(tokens - 1)] if good else [],
                "intended_s": at,
                "workload_class": CLASSES[int(cls[i])],
                "step": min(n_steps - 1, int(sent / (span / n_steps))),
                "session": i // turns,
                "turn": i % turns + 1,
            }
            fh.write(orjson.dumps(line) + b"\n")


def _plan(lines: int, n_steps: int) -> tuple[LoadTiming, list[LoadStep], list[StepCounts]]:
    span = lines / RATE
    timing = LoadTiming(
        requested_concurrency=256, workers_started=256, barrier_released=True,
        issue_start_s=0.0, issue_end_s=span, drain_end_s=span + 5.0, issued=lines,
        offered_rate=RATE,
    )  # fmt: skip
    width = span / n_steps
    steps = [
        LoadStep(index=i, origin="sweep", label=f"step {i}", start_s=i * width,
                 end_s=(i + 1) * width, settle_s=min(2.0, width / 4))
        for i in range(n_steps)
    ]  # fmt: skip
    return timing, steps, [StepCounts(offered_rate=RATE) for _ in steps]


def old_way(path: Path, lines: int, n_steps: int, turns: int) -> None:
    """One summarize_load per slice, as before one read (finalize's and verify's)."""
    timing, steps, counts = _plan(lines, n_steps)
    config, method = _config(turns), "nearest-rank"
    ttfts: list[tuple[int, float]] = []
    load = summarize_load(
        path, timing, method, visit=lambda ln: ttfts.append((ln["worker"], ln["ttft_s"] or 0))
    )
    good = good_line(config)
    done = []
    for step, c in zip(steps, counts, strict=True):
        st = step_timing(step, timing, c, last=step is steps[-1])
        assert st is not None
        n = [0]
        s = summarize_load(
            path, st, method, visit=lambda ln, n=n: n.__setitem__(0, n[0] + good(ln)),
            keep=step_lines(step.index, st),
        )  # fmt: skip
        done.append(step.model_copy(update={"load": s, "goodput": n[0] / (s.issue_s or 1)}))
    sweep_of(done, config)
    issued = Counter(ln.get("workload_class") for ln in read_jsonl(path))
    for name in CLASSES:
        summarize_load(
            path, class_timing(timing, issued[name]), method,
            keep=lambda ln, name=name: ln.get("workload_class") == name,
        )  # fmt: skip
    seen = Counter(ln.get("turn") for ln in read_jsonl(path))  # the sessions' pass
    whole = LoadTiming.from_summary(load)
    for i in range(1, turns + 1):
        sliced = dataclasses.replace(whole, issued=seen[i], backoffs=0, worker_errors={})
        summarize_load(path, sliced, method, keep=lambda ln, i=i: ln.get("turn") == i)


def keeps_way(path: Path, lines: int, n_steps: int, turns: int) -> None:
    """One read, every slice's keep called for every line (summarize_slices)."""
    timing, steps, counts = _plan(lines, n_steps)
    slices = []
    for step, c in zip(steps, counts, strict=True):
        st = step_timing(step, timing, c, last=step is steps[-1])
        assert st is not None
        slices.append(LoadSlice(step_lines(step.index, st), st))
    for name in CLASSES:
        keep = lambda ln, name=name: ln.get("workload_class") == name  # noqa: E731
        slices.append(LoadSlice(keep, class_timing(timing, 0)))
    for i in range(1, turns + 1):
        slices.append(LoadSlice(lambda ln, i=i: ln.get("turn") == i, timing))
    summarize_slices(path, timing, "nearest-rank", slices)


def one_way(path: Path, lines: int, n_steps: int, turns: int) -> None:
    """One read, routed: what finalize, verify and recover run."""
    timing, steps, counts = _plan(lines, n_steps)
    ttfts: list[tuple[int, float]] = []
    load_figures(
        path, timing, _config(turns), "nearest-rank", steps, counts,
        visit=lambda ln: ttfts.append((ln["worker"], ln["ttft_s"] or 0)),
    )  # fmt: skip


WAYS = {"old": old_way, "keeps": keeps_way, "one": one_way}


def _measure(way: str, path: Path, lines: int, n_steps: int, turns: int) -> None:
    t0 = time.perf_counter()
    WAYS[way](path, lines, n_steps, turns)
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"way": way, "wall_s": wall, "peak_rss_mb": rss_mb}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    ap.add_argument("--ways", default="old,keeps,one")
    ap.add_argument("--measure", choices=sorted(WAYS), help=argparse.SUPPRESS)
    ap.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        _measure(a.measure, a.journal, a.lines, a.steps, a.turns)
        return 0
    with tempfile.TemporaryDirectory(prefix="soaktop-bench-finalize-") as tmp:
        path = Path(tmp) / "requests.jsonl"
        t0 = time.perf_counter()
        write_journal(path, a.lines, a.steps, a.turns, a.tokens)
        size_mb = path.stat().st_size / 1e6
        print(
            f"journal: {a.lines:,} lines, {size_mb:,.0f} MB, {a.steps} steps, "
            f"{len(CLASSES)} classes, {a.turns} turns (written in "
            f"{time.perf_counter() - t0:.1f} s)"
        )
        print(f"{'way':<6} {'wall s':>8} {'peak RSS MB':>12}")
        for way in a.ways.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--measure", way, "--journal", str(path),
                 "--lines", str(a.lines), "--steps", str(a.steps), "--turns", str(a.turns)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r['way']:<6} {r['wall_s']:>8.1f} {r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
