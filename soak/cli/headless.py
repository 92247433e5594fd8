"""Headless mode: follow the runner's snapshots and print one plain line per interval.

Reads only ``snapshots.jsonl`` (the same data the TUI shows); never computes statistics.
Every line printed goes through :func:`~soak.safe_text.safe_line`: reasons, event messages
and failure classes quote the server, and a terminal escape in them is shown, not obeyed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, cast

from loadgen.stats import LatencyStats
from soak.after.record_view import read_leniently
from soak.after.step_table import step_lines
from soak.record.class_figures import class_lines
from soak.record.events import Event
from soak.record.journal import DropWriteErrors, JsonlTail
from soak.record.models import (
    EXIT_CODES,
    EXIT_DETACHED_SIGNAL,
    EXIT_STORAGE,
    RunRecord,
    Status,
    load_record,
)
from soak.record.sections import GateProgress, ThresholdState
from soak.record.snapshot import MatrixProgress, Snapshot
from soak.record.status_label import (
    figure_flag,
    figures_valid,
    flagged,
    status_label,
    status_words,
)
from soak.run.spawn import AttachedRunner, RunnerHandle
from soak.safe_text import safe_line


def _f(v: float | None, fmt: str = "{:.3f}") -> str:
    return "—" if v is None else fmt.format(v)


def _mmss(s: float | None) -> str:
    if s is None:
        return "--:--"
    s = max(0, int(s))
    return f"{s // 60:02d}:{s % 60:02d}"


def status_line(snap: Snapshot) -> str:
    """One operator line: phase, time, counts, failures, concurrency, tok/s, TTFT, E2E.
    A matrix run's says the cell and repetition instead (:func:`matrix_status_line`)."""
    if snap.matrix is not None and not snap.phase.endswith("_gates"):
        return matrix_status_line(snap, snap.matrix)
    load, phase = snap.load, snap.phase
    if phase == "load":
        where = f"load {_mmss(load.issue_elapsed_s)}/{_mmss(load.issue_total_s)}"
    else:
        where = f"{phase} {_mmss(snap.phase_elapsed_s)}"
    fails = load.failures_by_class
    fail_txt = ", ".join(f"{n} {c}" for c, n in fails.items()) if fails else "0"
    win, cum = load.window, load.cumulative
    ttft = cum.ttft_s if cum is not None else LatencyStats()
    e2e = cum.e2e_s if cum is not None else LatencyStats()
    tok_win = _f(win.output_tokens_per_s if win is not None else None, "{:.0f}")
    tok_cum = _f(cum.output_tokens_per_s if cum is not None else None, "{:.0f}")
    gates = gate_text(snap.gates)
    return safe_line(
        (f"[{where}] gates {gates} | " if phase.endswith("_gates") else f"[{where}] ")
        + f"done {load.completed} fail {fail_txt} | "
        f"in-flight {load.in_flight}/{load.workers_started} of "
        f"{load.requested_concurrency} | out tok/s {tok_win} win {tok_cum} cum | "
        f"TTFT p50 {_f(ttft.p50)} p99 {_f(ttft.p99)} s | "
        f"E2E p50 {_f(e2e.p50)} p99 {_f(e2e.p99)} s"
    )


def matrix_status_line(snap: Snapshot, m: MatrixProgress) -> str:
    """``[cell 3/4 ~6000/C4 · rep 2/3 · 3/4 requests] done 21 fail 0 | in-flight 3/4 of 4
    | out tok/s 412 win | last cell ~6000 / C1: median E2E 3.120 s, TTFT 0.412 s``: no
    issue window and no percentiles pooled across cells (they mix different inputs)."""
    load = snap.load
    where = m.where()
    if snap.phase not in ("warmup", "matrix"):
        where = f"{snap.phase} {_mmss(snap.phase_elapsed_s)} · {where}"
    fails = load.failures_by_class
    fail_txt = ", ".join(f"{n} {c}" for c, n in fails.items()) if fails else "0"
    win = load.window
    tok_win = _f(win.output_tokens_per_s if win is not None else None, "{:.0f}")
    last = m.finished[-1] if m.finished else None
    cell = (
        f"last cell {last.label}: median E2E {_f(last.e2e_median_s)} s, "
        f"TTFT {_f(last.ttft_content_median_s)} s"
        if last is not None
        else "no cell finished yet"
    )
    return safe_line(
        f"[{where}] done {load.completed} fail {fail_txt} | "
        f"in-flight {load.in_flight}/{load.workers_started} of {load.requested_concurrency} | "
        f"out tok/s {tok_win} win | {cell}"
    )


def gate_text(gates: dict[str, dict[str, GateProgress]]) -> str:
    """``before json 24/24 tools 8/8; after json 3/24…`` (done so far when unfinished)."""
    parts = []
    for phase, suites in gates.items():
        counts = []
        for name, g in suites.items():
            done, total = g.done, g.total
            frac = f"{g.passed}/{total}" + ("" if done >= total else f" ({done} done)")
            counts.append(f"{name} {frac}")
        parts.append(f"{phase} " + " ".join(counts))
    return "; ".join(parts) or "none"


def _turn_lines(rec: RunRecord) -> list[str]:
    """A conversation load (``--turns``): one line per turn index, one for the sessions."""
    flag = figure_flag(rec.status.value)
    out = [
        f"  turn {t.index}: completed {t.load.completed}, failed {t.load.failed}, "
        f"input {_f(t.load.input_tokens_mean, '{:,.0f}')} tok mean, "
        f"P99 TTFT {_f(t.load.ttft_s.p99)} s{flag}, P99 E2E {_f(t.load.e2e_s.p99)} s{flag}, "
        f"sessions ended {t.sessions_ended}"
        for t in rec.turns
    ]
    if (s := rec.sessions) is not None:
        cut = f", {s.history_truncated} answers cut at 64 KiB" if s.history_truncated else ""
        out.append(
            f"  sessions ({s.turns} turns, think {s.think_time_s:g} s): {s.started} started, "
            f"{s.completed} completed, {s.ended_early} ended early, {s.unfinished} "
            f"unfinished{cut}"
        )
    return out


def final_report(rec: RunRecord, run_dir: Path) -> str:
    """The verdict block printed when a run ends (the TUI frontend prints it too).

    A run that is not a valid measurement (INVALID, ABORTED) says so on its first line,
    in seed 000's words when it also failed as a server attempt (``INVALID + FAILED``),
    and each throughput and latency figure carries ``(invalid)``/``(aborted)``."""
    status = rec.status.value
    head = f"{status_label(rec)}  {rec.run_id}"
    out = [head if figures_valid(rec) else f"{head}  ({status_words(rec)})"]
    for r in rec.reasons:
        out.append(f"  - [{r.effect}] {r.message}")

    def fig(v: float | None, fmt: str = "{:.3f}") -> str:
        return flagged(status, _f(v, fmt))

    if rec.load and rec.load.barrier_released:
        ld = rec.load
        out.append(
            f"  completed {ld.completed}, failed {ld.failed}, "
            f"elapsed {_f(ld.elapsed_s, '{:.2f}')} s "
            f"(issue {_f(ld.issue_s, '{:.2f}')} + drain {_f(ld.drain_s, '{:.2f}')}), "
            f"output {fig(ld.output_tokens_per_s, '{:.1f}')} tok/s, "
            f"P99 TTFT {_f(ld.ttft_s.p99)} s{figure_flag(status)}, "
            f"P99 E2E {_f(ld.e2e_s.p99)} s{figure_flag(status)} ({ld.ttft_s.method})"
        )
        if ld.offered_rate is not None:  # open loop: did the client hold the schedule?
            late = ld.lateness_s.p99
            # An open loop of sessions: the schedule's arrivals start sessions, not requests.
            per = "sessions/s" if rec.sessions is not None else "req/s"
            out.append(
                f"  open loop: offered {_f(ld.offered_rate, '{:.1f}')} {per}, achieved "
                f"{_f(ld.achieved_rate, '{:.1f}')} {per}, lateness p99 "
                f"{_f(None if late is None else late * 1e3, '{:.1f}')} ms, held by cap "
                f"{ld.held_by_cap or 0}, P99 TTFT from intended {_f(ld.ttft_from_intended_s.p99)} s"
            )
    out += _turn_lines(rec)
    out += class_lines(rec.classes, figure_flag(status))  # a mix: one line per class
    out += step_lines(rec, figure_flag(status))  # a stepped load: one row per step
    if rec.matrix is not None:
        out.append("  matrix cell      done  median E2E  p50 (nearest)  TTFT content  input tok")
        for c in rec.matrix.cells:
            out.append(
                f"  {c.label:<14} {c.completed:>3}/{c.completed + c.failed:<3} "
                f"{fig(c.e2e_median_s):>9} s {fig(c.e2e_p50_nearest_s):>12} s "
                f"{fig(c.ttft_content_median_s):>11} s  {_f(c.input_tokens_mean, '{:,.0f}'):>9}"
            )
    if rec.gates:
        out.append(
            "  gates: "
            + "; ".join(
                f"{phase} " + ", ".join(f"{s} {g.passed}/{g.total}" for s, g in su.items())
                for phase, su in rec.gates.items()
            )
        )
    trend = [t for t in rec.thresholds if t.metric.startswith(("drift.", "leak."))]
    for t in rec.thresholds:
        if t not in trend:
            observed = flagged(status, str(t.observed), ("None",))
            out.append(f"  threshold {t.condition}: {t.state} (observed {observed})")
    out += _endurance_lines(rec, trend)
    if evidence := sorted(p for p in rec.files if p.startswith("evidence/")):
        shown = ", ".join(evidence[:5]) + (
            f" +{len(evidence) - 5} more" if len(evidence) > 5 else ""
        )
        out.append(f"  probe evidence ({len(evidence)} files): {shown}")
    out.append(f"  record: {run_dir / 'record.json'}")
    return "\n".join(safe_line(row) for row in out)


def follow(
    handle: RunnerHandle | AttachedRunner,
    interval_s: float,
    out: TextIO = sys.stdout,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
    detach_on_hup: bool = True,
    interrupt_detaches: bool = False,
) -> int:
    """Print status lines until the runner exits.

    SIGINT/SIGTERM are forwarded to the runner (graceful stop; a second SIGINT aborts the
    drain). SIGHUP — the SSH link dropped — detaches: the runner, in its own session,
    finishes the soak and writes its record; this process leaves quietly with 129.
    With ``detach_on_hup=False`` (the demo, whose engine dies with this process) SIGHUP
    is forwarded like the others, and this process follows the stop to its end without a
    terminal (writes to a hung-up terminal fail; they are dropped, not fatal). With
    ``interrupt_detaches`` (``soaktop attach``) every signal only detaches: the run
    belongs to whoever started it.
    """
    out = cast(TextIO, DropWriteErrors(out))
    forwarded: list[int] = []
    hung_up = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal hung_up
        if interrupt_detaches or (signum == signal.SIGHUP and detach_on_hup):
            hung_up = True
            return
        handle.signal(signum)  # forward first: printing here could fail on a dead terminal
        forwarded.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    print(
        f"soaktop: run {safe_line(handle.run_id)}\n         dir {safe_line(handle.run_dir)}",
        file=out,
        flush=True,
    )
    tail = JsonlTail(handle.run_dir / "snapshots.jsonl")
    last_print = clock()
    last_phase = None
    last: Snapshot | None = None
    while True:
        if hung_up:
            return _detached(handle, out)
        while forwarded:
            name = signal.Signals(forwarded.pop(0)).name
            print(f"soaktop: {name} → stopping the run (drain, record)", file=out, flush=True)
        rc = handle.poll()
        for raw in tail.read_new():
            # Another version's line (attach) reads as its record would; a damaged one is skipped.
            snap, _ = read_leniently(Snapshot, raw, must_have=frozenset({("t",)}))
            if snap is None:
                continue
            last = snap
            for ev in snap.events:
                if ev.kind in _SHOWN_EVENTS or ev.severity == "critical":
                    print(event_line(ev), file=out)
        if last is not None and (last.phase != last_phase or clock() - last_print >= interval_s):
            print(status_line(last), file=out, flush=True)
            last_print = clock()
            last_phase = last.phase
        if rc is not None:
            return _ended(handle, rc, out)
        time.sleep(poll_s)


def _ended(handle: RunnerHandle | AttachedRunner, rc: int, out: TextIO) -> int:
    """The runner exited with ``rc``: its final report and exit code, or why there is no
    record and how to get one."""
    if (handle.run_dir / "record.json").exists():
        rec = load_record(handle.run_dir)
        print(final_report(rec, handle.run_dir), file=out, flush=True)
        for reason in rec.reasons:  # the cause on stderr too, where scripts look for it
            if reason.code == "storage_error":
                print(f"soaktop: {safe_line(reason.message)}", file=sys.stderr, flush=True)
        return rec.exit_code
    if rc == EXIT_STORAGE:
        print(
            f"soaktop: the runner could not write its run directory {handle.run_dir} "
            "(disk full, quota or I/O error: its runner.log may say which) and no record "
            "fitted.\n"
            f"  free some space, then: soaktop recover {handle.run_dir}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_STORAGE
    how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
    print(
        f"soaktop: the runner died ({how}) without writing a record.\n"
        f"  its log: {handle.run_dir / 'runner.log'}\n"
        f"  finalise from the journals with: soaktop recover {handle.run_dir}",
        file=out,
        flush=True,
    )
    return EXIT_CODES[Status.ABORTED]


def event_line(ev: Event) -> str:
    """``  12:00:03 fault: GPU 1 ...`` — one event as printed while following a run."""
    return safe_line(f"  {ev.wall[11:19]} {ev.kind}: {ev.message}")


_SHOWN_EVENTS = frozenset(
    {"phase", "barrier", "control", "mark", "fault", "health", "gate", "threshold"}
)
EXIT_DETACHED = EXIT_DETACHED_SIGNAL
"""What a detach on a signal exits with (129, as ``128 + SIGHUP``)."""


def _detached(handle: RunnerHandle | AttachedRunner, out: TextIO) -> int:
    with contextlib.suppress(OSError):  # the terminal may already be gone
        print(
            f"soaktop: detached; the run goes on (pid {handle.pid}).\n"
            f"  its record will be {handle.run_dir / 'record.json'}\n"
            f"  re-attach with: soaktop attach {handle.run_dir}",
            file=out,
            flush=True,
        )
    return EXIT_DETACHED


def _endurance_lines(rec: RunRecord, trend: list[ThresholdState]) -> list[str]:
    """The run judged on its timeline: one line, then each drift or leak in its words."""
    e = rec.endurance
    if e is None:
        return []
    if not e.judged:
        return [f"  endurance: not judged — {e.not_judged_why}"]
    found = [flagged(rec.status.value, f.words) for f in e.drift if f.state == "drift"]
    found += [flagged(rec.status.value, f.words) for f in e.leaks if f.state == "leak"]
    bad = [t.condition for t in trend if t.state != "ok"]
    head = (
        f"  endurance: {e.judged_windows} windows of {e.window_s} s judged "
        f"({len(trend)} drift/leak thresholds, policy {e.policy_source}): "
        + (f"not ok: {', '.join(bad)}" if bad else "stable" if not found else "within the policy")
    )
    return [head] + [f"    {w}" for w in found]
