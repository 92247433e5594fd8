"""The window series recomputed from the journals: the record's ``windows`` and ``verify``'s.

Requests come one line at a time (:meth:`JournalWindows.offer`), so the series can be
tallied in the same read of ``requests.jsonl`` as the load's figures
(:func:`soak.judge.load_pass.load_figures`' ``every``): a 1-hour soak's journal is
hundreds of thousands of lines of a few kilobytes each, and every parse of it costs
seconds. Telemetry and the loop lag come from their own (small) journals when the series
is made (:meth:`JournalWindows.windows`).
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from loadgen.stats import PercentileMethod, summarize
from soak.record.endurance import WindowFigures
from soak.record.journal import read_jsonl
from soak.record.tally_samples import ItlShare, ShareJoin, gap_stats, shifted
from soak.record.windows import (
    GaugeWindow,
    SeriesSpec,
    gpu_key,
    host_sample_into,
    load_figures,
    preemptions_since,
    window_kind,
)

LATE_LINE_S = 5.0
"""A request line may arrive this long after its window ended (lines are journaled in
finishing order, give or take a loop turn) before the window's percentiles are final."""


@dataclass
class _LoadBucket:
    share: ItlShare
    """Where the window's gaps are held (its own, or the read's: :class:`JournalWindows`)."""
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    sanity: Counter[str] = field(default_factory=Counter)
    flagged: int = 0
    lat: dict[str, list[float]] = field(default_factory=lambda: {"ttft": [], "e2e": [], "tpot": []})
    itl_lines: array[int] = field(default_factory=lambda: array("I"))
    """The lines with gaps, by their index in :attr:`share` (the gaps as the journal has
    them, whole µs: 4 bytes a gap, selected among once the window is final)."""
    stats: dict[str, tuple[float | None, float | None]] | None = None
    """p50/p99 per latency once final (its raw values then dropped)."""
    closed: bool = False
    """A later byte range's reader only: the window is final there (its percentiles are
    made where the ranges are joined, from every range's samples)."""

    def add(self, line: dict[str, Any]) -> None:
        if not line.get("ok"):
            self.failed += 1
            self.failures[str(line.get("failure"))] += 1
            return
        self.completed += 1
        ot = line.get("output_tokens")
        self.output_tokens += ot or 0
        flags = line.get("sanity")
        if flags:
            self.flagged += 1
            self.sanity.update(str(f) for f in flags)
        if self.stats is not None or self.closed:
            return  # a line later than LATE_LINE_S: counted, not in the percentiles
        ttft, e2e = line.get("ttft_s"), line.get("e2e_s")
        if ttft is not None:
            self.lat["ttft"].append(ttft)
        if e2e is not None:
            self.lat["e2e"].append(e2e)
        if ttft is not None and e2e is not None and ot and ot > 1:
            self.lat["tpot"].append((e2e - ttft) / (ot - 1))
        gaps = line.get("itl_us")
        if gaps:
            self.itl_lines.append(self.share.of(line, gaps))

    def join(self, later: _LoadBucket, shares: ShareJoin) -> None:
        """The same window's bucket of a later byte range added: its counts, and its
        samples unless the window is final here (then they are late lines)."""
        self.completed += later.completed
        self.failed += later.failed
        self.output_tokens += later.output_tokens
        self.failures.update(later.failures)
        self.sanity.update(later.sanity)
        self.flagged += later.flagged
        if self.stats is not None:
            return
        for key, values in self.lat.items():
            values.extend(later.lat[key])
        if later.itl_lines:
            self.itl_lines.extend(shifted(later.itl_lines, shares.base(self.share, later.share)))

    def finish(self, method: PercentileMethod) -> None:
        if self.stats is not None:
            return
        arrays: dict[str, NDArray[np.float64]] = {
            k: np.asarray(v, dtype=np.float64) for k, v in self.lat.items()
        }
        self.stats = {}
        for key, arr in arrays.items():
            s = summarize(arr, method)
            self.stats[key] = (s.p50, s.p99)
        gaps = gap_stats(self.share.micros(self.itl_lines), method)
        self.stats["itl"] = (gaps.p50, gaps.p99)
        self.lat = {"ttft": [], "e2e": [], "tpot": []}
        self.itl_lines = array("I")
        self.share = _DROPPED


_DROPPED = ItlShare()
"""A final window's share: its own gaps are let go (an empty share holds nothing)."""


class JournalWindows:
    """The request side of the recomputed series over ``spec``, tallied one journal line
    at a time (:meth:`offer`: every line of ``requests.jsonl``, warm-up included), then
    made with the telemetry into the window series (:meth:`windows`).

    A window's percentiles are made, and its samples dropped, once the lines have moved
    :data:`LATE_LINE_S` past its end: memory holds a few windows' samples, not the hour's.
    The gaps are held in ``share`` when one is given — the read's, which holds every gap
    of the load for the load's own figures anyway (:func:`soak.judge.load_pass.load_figures`'
    ``share``), so a gap is parsed into memory once, not once for the load and again for
    its window; with none, each window holds its own until it is final.
    """

    def __init__(
        self,
        spec: SeriesSpec,
        method: PercentileMethod = "nearest-rank",
        share: ItlShare | None = None,
    ) -> None:
        self.spec = spec
        self.method: PercentileMethod = method
        self.buckets = [
            _LoadBucket(ItlShare() if share is None else share) for _ in range(spec.count)
        ]
        self.warmup = 0
        """Lines the warm-up journaled."""
        self._final_upto = 0  # windows below this index have final percentiles
        self._later_range = False  # a later byte range's reader: close, do not finish

    def offer(self, line: dict[str, Any]) -> None:
        """One line of ``requests.jsonl``: a load line into the window it ended in."""
        phase = line.get("phase", "load")
        if phase == "warmup":
            self.warmup += 1
        if phase != "load" or line.get("cancelled"):
            return
        t = line.get("end_s")
        if t is None:
            t = line.get("sent_s")
        if not isinstance(t, int | float):
            return
        spec = self.spec
        i = spec.index(float(t))
        if i is None:
            return
        self.buckets[i].add(line)
        while (
            self._final_upto < i
            and t > spec.origin_s + (self._final_upto + 1) * spec.window_s + LATE_LINE_S
        ):
            bucket = self.buckets[self._final_upto]
            if self._later_range:
                bucket.closed = True
            else:
                bucket.finish(self.method)
            self._final_upto += 1

    def begin_later_range(self) -> None:
        """Whether a line is late for its window depends on the lines before the range
        (the latest end they reached): a later range's reader closes its windows without
        making their percentiles, and the join decides which of its samples count."""
        self._later_range = True

    def part(self) -> tuple[list[_LoadBucket], int, int]:
        """The windows, the warm-up's lines and how far the windows are final, to be sent
        back by a later range's reader."""
        return self.buckets, self.warmup, self._final_upto

    def join(self, part: tuple[list[_LoadBucket], int, int], shares: ShareJoin) -> None:
        """A later range's windows (:meth:`part`) joined into these. A window is final at
        a line once any line before it ended :data:`LATE_LINE_S` past the window's end —
        a running maximum, so the whole read's finality at a later range's line is the
        greater of this read's so far and the range's own: the range's samples of a
        window already final here are late (counted, not in its percentiles), and the
        rest were taken exactly as one read would have taken them. (A window is final
        here exactly when it lies below ``_final_upto``: its bucket has its stats.)"""
        buckets, warmup, final_upto = part
        self.warmup += warmup
        for mine, theirs in zip(self.buckets, buckets, strict=True):
            mine.join(theirs, shares)
        while self._final_upto < final_upto:
            self.buckets[self._final_upto].finish(self.method)
            self._final_upto += 1

    def read(self, run_dir: Path) -> JournalWindows:
        """Every line of the run's ``requests.jsonl`` offered (a read of its own)."""
        for line in read_jsonl(run_dir / "requests.jsonl"):
            self.offer(line)
        return self

    def windows(self, run_dir: Path) -> list[WindowFigures]:
        """The series: the lines offered, with ``telemetry.jsonl`` and the loop lag and
        behind share of ``snapshots.jsonl``."""
        spec = self.spec
        gauges = [GaugeWindow() for _ in self.buckets]
        _telemetry_into(run_dir / "telemetry.jsonl", spec, gauges)
        for snap in read_jsonl(run_dir / "snapshots.jsonl"):
            t, client = snap.get("t"), snap.get("client")
            if not isinstance(client, dict) or not isinstance(t, int | float):
                continue
            i = spec.index(float(t) - 1e-9)  # a tick's figures are of the second before it
            if i is None:
                continue
            lag, behind = client.get("loop_lag_s"), client.get("behind_fraction_1s")
            if isinstance(lag, int | float):
                gauges[i].lags.append(float(lag))
            if isinstance(behind, int | float):
                gauges[i].behind.append(float(behind))
        out = []
        for i, (b, g) in enumerate(zip(self.buckets, gauges, strict=True)):
            b.finish(self.method)
            out.append(make_window(i, spec, b, g))
        return out


def windows_from_journals(
    run_dir: Path, spec: SeriesSpec, method: PercentileMethod = "nearest-rank"
) -> tuple[list[WindowFigures], int]:
    """The series recomputed from ``requests.jsonl`` (load lines), ``telemetry.jsonl`` and
    the loop lag in ``snapshots.jsonl`` — the record's ``windows`` and ``verify``'s — and
    how many lines the warm-up journaled (a read of ``requests.jsonl`` of its own)."""
    tally = JournalWindows(spec, method).read(run_dir)
    return tally.windows(run_dir), tally.warmup


def make_window(i: int, spec: SeriesSpec, b: _LoadBucket, g: GaugeWindow) -> WindowFigures:
    """One recomputed window."""
    start = spec.origin_s + i * spec.window_s
    end = start + spec.window_s
    kind = window_kind(start, end, spec.issue_end_s)
    w = WindowFigures(i=i, start_s=start, end_s=end, kind=kind, source="journal")
    load_figures(
        w,
        completed=b.completed,
        failed=b.failed,
        output_tokens=b.output_tokens,
        failures=dict(b.failures),
        sanity=dict(b.sanity),
        flagged=b.flagged,
    )
    stats = b.stats or {}
    for key in ("ttft", "e2e", "itl", "tpot"):
        p50, p99 = stats.get(key, (None, None))
        setattr(w, f"{key}_p50", p50)
        setattr(w, f"{key}_p99", p99)
    g.apply(w)
    return w


def _telemetry_into(path: Path, spec: SeriesSpec, gauges: list[GaugeWindow]) -> None:
    """Engine, host and GPU samples of ``telemetry.jsonl`` into their windows."""
    last_preempt: dict[int, float] = {}
    for sample in read_jsonl(path):
        t = sample.get("t")
        if not isinstance(t, int | float):
            continue
        source = sample.get("source")
        i = spec.index(float(t))
        if source == "engine":
            endpoint = sample.get("endpoint")
            values = sample.get("values")
            if not isinstance(endpoint, int) or not isinstance(values, dict) or sample.get("error"):
                continue
            preempted = preemptions_since(last_preempt, endpoint, values.get("preemptions_total"))
            if i is not None:
                gauges[i].engine(endpoint, values, preempted)
        elif i is None:
            continue
        elif source == "host":
            host_sample_into(gauges[i], sample)
        elif source in ("nvml", "dcgm"):
            for r in sample.get("gpus") or []:
                if isinstance(r, dict):
                    gauges[i].gpu(gpu_key(r), r.get("memory_used_mib"), r.get("util_percent"))
