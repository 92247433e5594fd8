"""The soak as a soak: the window series, the drift and leak findings, the live view.

A long run is judged on its timeline as well as its totals. The load is cut into
windows of ``window_s`` seconds (``--window``, default 60) on one timeline, from the
*series origin* (the first whole second after the barrier released and the warm-up
ended); each window holds the load's figures for the requests that *ended* in it, the
response-sanity counts, and the telemetry gauges sampled in it (:class:`WindowFigures`).

- ``windows.jsonl`` gets one :class:`WindowFigures` line per closed window as the run goes
  (from the live histograms: 1 % buckets), so a crash keeps the series;
- the record's ``windows`` are recomputed at the end from ``requests.jsonl`` and
  ``telemetry.jsonl`` (exact percentiles, :mod:`soak.record.windows`), which is also what
  ``soaktop verify`` recomputes;
- the record's ``endurance`` (:class:`Endurance`) is the judgement over them: the drift of
  each figure from the baseline windows to the end windows with a robust trend, the leak
  rate of each resource, the policy applied and what could not be judged;
- each snapshot carries :class:`EnduranceView`, the same judgement so far.

Figure names are the threshold grammar's (``drift.ttft.p99<+50%``): :data:`FIGURES` maps
each to its :class:`WindowFigures` field. Added in schema 1.2 (older records have
neither ``windows`` nor ``endurance``: they read as empty / None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from soak.record.shape import Section

WINDOWS_SCHEMA_VERSION = "1.2"
"""The run directory's schema version (``soak.record.models.SCHEMA_VERSION``, which imports
this module; a test holds them equal)."""


class WindowGpu(Section):
    """One GPU over one window: the mean of its samples (None: no sample in the window)."""

    gpu: str
    """``<host>/<index>`` for a DCGM exporter's GPU, the index for a local NVML one."""
    memory_used_mib: float | None = None
    memory_used_mib_max: float | None = None
    util_percent: float | None = None


class WindowFigures(Section):
    """One window of the series (a line of ``windows.jsonl``; an item of ``windows``)."""

    absent_unless_set = frozenset({"schema_version", "lost_seconds", "client_behind_fraction"})

    schema_version: str = WINDOWS_SCHEMA_VERSION
    """Written on ``windows.jsonl`` lines only."""
    lost_seconds: int = 0
    """Live lines only: seconds of the live figures the tick could not fold in time (a
    stalled loop); the window's load figures miss them."""
    i: int
    """Index from the series origin (0 is the first window after the warm-up)."""
    start_s: float
    """Seconds since the run's origin."""
    end_s: float
    kind: Literal["load", "partial", "drain"] = "load"
    """``load``: a whole window inside the issue window (judged); ``partial``: the last,
    cut short by the end of issuing; ``drain``: after issuing ended (never judged)."""
    source: Literal["live", "journal"] = "journal"
    """``live``: from the live histograms as the run went (1 % buckets); ``journal``:
    recomputed from the journals (exact)."""
    # -- the load ------------------------------------------------------------------------
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    output_tok_s: float | None = None
    req_s: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    e2e_p50: float | None = None
    e2e_p99: float | None = None
    itl_p50: float | None = None
    itl_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    error_rate: float | None = None
    """failed / (completed + failed); None when nothing ended in the window."""
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    output_len: float | None = None
    """Mean output tokens of the completed requests."""
    sanity_by_flag: dict[str, int] = Field(default_factory=dict)
    """Completed (HTTP 200) responses the sanity checks flagged, per flag."""
    sanity_rate: float | None = None
    """Flagged completed responses / completed (a response with two flags counts once)."""
    # -- the engine (summed over endpoints; KV usage: the worst endpoint) ------------------
    engine_running: float | None = None
    engine_waiting: float | None = None
    engine_kv_usage: float | None = None
    """Mean KV-cache usage (0–1) over the window's scrapes, the worst endpoint."""
    engine_preemptions: float | None = None
    """Preemptions counted in the window (counter deltas)."""
    # -- the host ------------------------------------------------------------------------
    server_rss_mb: float | None = None
    """Mean RSS of the ``--server-pid`` processes, summed."""
    server_cpu_percent: float | None = None
    client_rss_mb: float | None = None
    client_open_files: float | None = None
    loop_lag_p99_s: float | None = None
    """The worst tick's loop lag (live lines; recomputed from ``snapshots.jsonl``)."""
    client_behind_fraction: float | None = None
    """Mean over the window's ticks of the share of sampled socket reads that found bytes
    already queued (``loadgen.read_health``; the snapshots' ``behind_fraction_1s``).
    Written only when a tick had enough samples to say."""
    gpus: list[WindowGpu] = Field(default_factory=list)
    gpu_memory_used_mib: float | None = None
    """The GPU with the most memory used (mean over the window)."""
    gpu_util_percent: float | None = None
    """The busiest GPU (mean over the window)."""


FigureKind = Literal["throughput", "latency", "ratio", "count", "mib", "percent", "seconds"]


@dataclass(frozen=True)
class FigureInfo:
    """One figure of the series: its field, unit and which way is bad."""

    name: str
    field: str
    unit: str
    kind: FigureKind
    bad: Literal["up", "down"]
    words: str


def _fig(
    name: str, field: str, unit: str, kind: FigureKind, bad: Literal["up", "down"], words: str
) -> FigureInfo:
    return FigureInfo(name, field, unit, kind, bad, words)


FIGURES: dict[str, FigureInfo] = {
    f.name: f
    for f in (
        _fig("output_tok_s", "output_tok_s", "tok/s", "throughput", "down", "throughput"),
        _fig("req_s", "req_s", "req/s", "throughput", "down", "request rate"),
        _fig("ttft.p50", "ttft_p50", "s", "latency", "up", "TTFT p50"),
        _fig("ttft.p99", "ttft_p99", "s", "latency", "up", "TTFT p99"),
        _fig("e2e.p50", "e2e_p50", "s", "latency", "up", "E2E p50"),
        _fig("e2e.p99", "e2e_p99", "s", "latency", "up", "E2E p99"),
        _fig("itl.p50", "itl_p50", "s", "latency", "up", "ITL p50"),
        _fig("itl.p99", "itl_p99", "s", "latency", "up", "ITL p99"),
        _fig("tpot.p50", "tpot_p50", "s", "latency", "up", "TPOT p50"),
        _fig("tpot.p99", "tpot_p99", "s", "latency", "up", "TPOT p99"),
        _fig("error_rate", "error_rate", "", "ratio", "up", "failure rate"),
        _fig("output_len", "output_len", "tok", "count", "down", "output length"),
        _fig("sanity_rate", "sanity_rate", "", "ratio", "up", "flagged responses"),
        _fig("engine.running", "engine_running", "", "count", "down", "running"),
        _fig("engine.waiting", "engine_waiting", "", "count", "up", "waiting"),
        _fig("engine.kv_usage", "engine_kv_usage", "", "ratio", "up", "KV usage"),
        _fig("engine.preemptions", "engine_preemptions", "", "count", "up", "preemptions"),
        _fig("server.rss_mb", "server_rss_mb", "MB", "mib", "up", "server RSS"),
        _fig("server.cpu_percent", "server_cpu_percent", "%", "percent", "up", "server CPU"),
        _fig("gpu.memory_used_mib", "gpu_memory_used_mib", "MiB", "mib", "up", "GPU memory"),
        _fig("gpu.util_percent", "gpu_util_percent", "%", "percent", "down", "GPU util"),
        _fig("client.rss_mb", "client_rss_mb", "MB", "mib", "up", "client RSS"),
        _fig("client.open_files", "client_open_files", "", "count", "up", "open files"),
        _fig("client.loop_lag", "loop_lag_p99_s", "s", "seconds", "up", "loop lag"),
    )
}
"""Every figure of a window, by the name thresholds use after ``drift.``."""

LEAKS: dict[str, str] = {
    "server_rss": "server.rss_mb",
    "gpu_mem": "gpu.memory_used_mib",
    "kv_usage": "engine.kv_usage",
    "client_rss": "client.rss_mb",
    "open_files": "client.open_files",
}
"""The resources a leak is judged on (names after ``leak.``) and the figure each reads."""


def figure_value(window: WindowFigures, name: str) -> float | None:
    """The value of figure ``name`` (a key of :data:`FIGURES`) in one window."""
    value = getattr(window, FIGURES[name].field)
    return None if value is None else float(value)


# --- the judgement -------------------------------------------------------------------


class Trend(Section):
    """A robust trend over the judged windows: Theil–Sen slope with its 95 % interval and
    the Mann–Kendall test (``soak.judge.trend``)."""

    absent_unless_set = frozenset({"step_p"})

    n: int = 0
    """Windows with a value."""
    slope_per_h: float | None = None
    """Theil–Sen slope, in the figure's unit per hour."""
    slope_lo_per_h: float | None = None
    slope_hi_per_h: float | None = None
    mk_z: float | None = None
    mk_p: float | None = None
    """Two-sided p-value of the Mann–Kendall test (ties corrected)."""
    step_p: float | None = None
    """Pettitt's permutation p for one step in level, asked only of a change large
    against the scatter that Mann–Kendall alone did not find (``soak.judge.trend``);
    absent otherwise."""
    direction: Literal["rising", "falling", "flat", "unknown"] = "unknown"
    """``rising``/``falling`` only when the test is significant and the interval excludes
    zero; else ``flat``; ``unknown`` without enough windows."""


class DriftFinding(Section):
    """One figure from the baseline windows to the end windows."""

    figure: str
    """A key of :data:`FIGURES`."""
    unit: str = ""
    baseline: float | None = None
    """Median of the baseline windows."""
    end: float | None = None
    """Median of the end windows."""
    change: float | None = None
    """(end − baseline) / baseline (a fraction: −0.31 is −31 %); None when the baseline
    is zero or missing."""
    trend: Trend = Field(default_factory=Trend)
    since_s: float | None = None
    """When the drift began (the change point), seconds since the run's origin."""
    since_event: str | None = None
    """The moment it began with (a fault, a canary's first failure, an engine restart)."""
    state: Literal["stable", "drift", "no_data"] = "no_data"
    """``drift``: a significant monotone trend the bad way; ``stable``: none (noise);
    ``no_data``: not enough windows with a value."""
    words: str = ""
    """For people: "throughput −31% (first 10 min 4,210 tok/s → last 10 min 2,905),
    monotone since 00:42"."""


class LeakFinding(Section):
    """One resource that may grow and never come back."""

    absent_unless_set = frozenset({"step_p"})

    resource: str
    """A key of :data:`LEAKS`."""
    unit: str = ""
    """The rate's unit, e.g. ``MB/h``."""
    rate_per_h: float | None = None
    """Theil–Sen slope over the judged windows, per hour."""
    rate_lo_per_h: float | None = None
    rate_hi_per_h: float | None = None
    mk_p: float | None = None
    step_p: float | None = None
    """As :attr:`Trend.step_p`: absent unless Pettitt's step test was asked."""
    first: float | None = None
    """Median of the baseline windows."""
    last: float | None = None
    """Median of the end windows."""
    peak: float | None = None
    returned: bool | None = None
    """The end came back near the baseline after a peak (not a leak)."""
    state: Literal["stable", "leak", "no_data"] = "no_data"
    unsettled: bool = False
    """A significant rise under way from the first judged windows of a run too short to
    tell a leak from a warm-up: ``no_data``, said in the words and a note."""
    words: str = ""


class WarmupInfo(Section):
    """The warm-up: its requests are journaled with phase ``warmup`` and left out of the
    judged figures and the baseline."""

    spec: str
    """As asked: ``60s`` or ``200req``."""
    end_s: float | None = None
    """When it ended (seconds since the run's origin); None: the load ended first."""
    requests: int = 0
    """Requests sent during it (journaled with phase ``warmup``)."""


class Endurance(Section):
    """The record's ``endurance``: the run judged on its timeline."""

    window_s: int
    series_start_s: float | None = None
    """The series origin (seconds since the run's origin)."""
    warmup: WarmupInfo | None = None
    windows: int = 0
    """Windows in the series (every kind)."""
    judged_windows: int = 0
    """Whole load windows the judgement used."""
    baseline: list[int] = Field(default_factory=list)
    """[first, last] window index of the baseline."""
    end: list[int] = Field(default_factory=list)
    """[first, last] window index of the end."""
    judged: bool = False
    not_judged_why: str | None = None
    """Why there is no trend verdict (too few windows), in words."""
    policy: list[str] = Field(default_factory=list)
    """The drift and leak thresholds applied (the default soak policy unless given)."""
    policy_source: Literal["default", "given", "none"] = "default"
    drift: list[DriftFinding] = Field(default_factory=list)
    leaks: list[LeakFinding] = Field(default_factory=list)


class FigureNow(Section):
    """One figure in the live view: its baseline, its last window and the change."""

    figure: str
    baseline: float | None = None
    now: float | None = None
    change: float | None = None
    state: Literal["ok", "close", "breached", "no_data"] = "no_data"
    """Against the policy's bound on this figure: ``close`` past half of it."""
    significant: bool = False
    """The trend behind ``change`` is significant (``soak.judge.trend_metrics``): only
    then can a threshold on it be breached."""


class LeakNow(Section):
    """One resource's rate in the live view."""

    resource: str
    rate_per_h: float | None = None
    unit: str = ""
    state: Literal["ok", "close", "breached", "no_data"] = "no_data"
    significant: bool = False
    """The growth is a leak so far (significant, lasting): only then can a threshold on
    it be breached."""


class EnduranceView(Section):
    """A snapshot's ``endurance``: the judgement so far, refreshed when a window closes."""

    window_s: int
    windows: int = 0
    """Windows closed so far."""
    warmup_left_s: float | None = None
    """Seconds of warm-up still to go (None: none, or over)."""
    judged: bool = False
    not_judged_why: str | None = None
    baseline: list[int] = Field(default_factory=list)
    """[first, last] window index of the baseline (as the record's ``endurance``)."""
    figures: list[FigureNow] = Field(default_factory=list)
    leaks: list[LeakNow] = Field(default_factory=list)
    badge: Literal["ok", "close", "breached", "not_judged"] = "not_judged"
    """The worst state of any drift or leak threshold: the header shows it."""
    badge_words: str | None = None
