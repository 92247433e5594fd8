"""Watches the GPUs through DCGM exporters during the run: memory, heat, power, faults.

One task scrapes every exporter one after the other and then sleeps the rest of the
interval, so a slow exporter delays the next round instead of piling scrapes up. Each
sample is one ``telemetry.jsonl`` line; the latest readings go into snapshots
(:meth:`GpuWatch.view`); the extremes over the whole run, the faults and the throttle
reasons seen go into the record (:meth:`GpuWatch.summary`); the faults also reach the
verdict (:meth:`GpuWatch.fault_reasons`).

Faults, as events (kind ``fault``) the minute a scrape shows them:

- **Xid.** The exporter's ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* Xid and is sticky.
  The first reading of a GPU is its baseline; a later change to a non-zero value is a new
  Xid (critical; fails the run). A baseline that is already non-zero is reported once as
  "already set at start" (warning; a note, not a failure: the gauge cannot say when it
  happened, and it stays set until the exporter restarts). A change back to 0 (exporter
  restart) only moves the baseline. Limitation of the source: a second Xid with the same
  number as the last one does not change the gauge and cannot be seen here (the server
  log follower sees the kernel line).
- **Memory.** Growth of the uncorrectable ECC count (volatile, else aggregate), growth of
  the rows remapped after uncorrectable errors, and row remapping turning failed: each a
  fault that fails the run. Counts already there at the first reading are history.

Scrape trouble is a ``warning`` event once per change (failing / answering again), and a
GPU that drops out of its exporter's output (Xid 79, GPU fell off the bus) is one too.
GPU UUIDs and hostnames pass through ``scrub`` (the redactor) before anything is written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from probes.dcgm import DcgmSample, GpuReading, scrape_dcgm
from probes.server_log import XID_MEANING
from soak.events import EventLog, Severity
from soak.journal import JsonlWriter
from soak.record import Reason

MAX_XID_EVENTS_PER_GPU = 50
"""The record keeps this many Xid changes per GPU (a flapping gauge must not grow the
record without bound); later ones are counted in ``xid_events_dropped``."""
MAX_REASONS = 50
"""At most this many fault reasons reach the verdict; one more says how many were left out."""

_Key = tuple[int, str | None, int | None, str | None]
"""(url_index, host, gpu index, UUID) as exported (unscrubbed; never written)."""
_Effect = Literal["failed", "note"]


def xid_meaning(xid: int, exporter_words: str | None = None) -> str:
    """Words for an Xid: soaktop's table first, then the exporter's own ``err_msg``."""
    if xid in XID_MEANING:
        return XID_MEANING[xid]
    if exporter_words:
        return exporter_words
    return "not in soaktop's Xid table (see NVIDIA's Xid catalogue)"


@dataclass
class _Gpu:
    """Everything kept about one GPU (bounded: extremes, counts, capped lists)."""

    url_index: int
    index: int | None
    name: str | None
    host: str | None
    """Scrubbed."""
    uuid: str | None
    """Scrubbed."""
    at_start: bool
    """First read in the exporter's first scrape."""
    latest: GpuReading | None = None
    present: bool = True
    samples: int = 0
    min_free: float | None = None
    max_used: float | None = None
    max_temp: float | None = None
    max_power: float | None = None
    last_xid: int | None = None
    xid_events: list[dict[str, Any]] = field(default_factory=list)
    xid_events_dropped: int = 0
    ecc_last: int | None = None
    ecc_new: int = 0
    rows_last: int | None = None
    rows_new: int = 0
    remap_failed: bool | None = None
    throttle_seen: list[str] = field(default_factory=list)
    faults: int = 0


class GpuWatch:
    """Periodic scrapes of DCGM exporters, faults as events, extremes for the record."""

    def __init__(
        self,
        urls: list[str],
        origin_ns: int,
        journal: JsonlWriter,
        events: EventLog,
        interval_s: float = 1.0,
        scrub: Callable[[Any], Any] = lambda v: v,
        timeout_s: float = 5.0,
    ) -> None:
        self.urls = urls
        self.interval_s = interval_s
        self._origin_ns = origin_ns
        self._journal = journal
        self._events = events
        self._scrub = scrub
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s))
        self._task: asyncio.Task[None] | None = None
        self._gpus: dict[_Key, _Gpu] = {}
        self.latest: list[DcgmSample | None] = [None] * len(urls)
        self.scrapes = [0] * len(urls)
        self.errors = [0] * len(urls)
        self._failing = [False] * len(urls)
        self._failed_run = [0] * len(urls)
        self._reasons: list[Reason] = []
        self._reasons_dropped: dict[_Effect, int] = {"failed": 0, "note": 0}

    # -- scraping ------------------------------------------------------------------------
    async def scrape_all(self) -> list[DcgmSample]:
        """Scrape every exporter now, one after the other."""
        out = []
        for i, url in enumerate(self.urls):
            s = await scrape_dcgm(self._client, url, self._origin_ns)
            self._take(i, s)
            out.append(s)
        return out

    async def _run(self) -> None:
        while True:
            start = time.monotonic()
            await self.scrape_all()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - start)))

    def start(self) -> None:
        """Begin periodic scraping on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gpu-watch")

    async def stop(self) -> None:
        """Stop scraping and close the HTTP client."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.aclose()

    # -- one sample ----------------------------------------------------------------------
    def _text(self, s: str | None) -> str | None:
        return None if s is None else str(self._scrub(s))

    def _take(self, i: int, s: DcgmSample) -> None:
        first_scrape = self.scrapes[i] == 0
        self.scrapes[i] += 1
        self.latest[i] = s
        if s.error is not None:
            self.errors[i] += 1
            self._journal.write(
                self._scrub({"source": "dcgm", "url_index": i, "t": s.t, "error": s.error})
            )
            self._failed_run[i] += 1
            if not self._failing[i]:
                self._failing[i] = True
                self._events.emit(
                    "warning",
                    f"GPU telemetry: DCGM exporter {i} scrape failed: {self._text(s.error)}",
                    "warning",
                    source="dcgm",
                    url_index=i,
                    error=self._text(s.error),
                )
            return
        if self._failing[i]:
            self._failing[i] = False
            n, self._failed_run[i] = self._failed_run[i], 0
            self._events.emit(
                "warning",
                f"GPU telemetry: DCGM exporter {i} answers again after {n} failed scrape(s)",
                "info",
                source="dcgm",
                url_index=i,
                failed_scrapes=n,
            )
        self._failed_run[i] = 0
        gpus = []
        for r in s.readings:
            line = asdict(r) | {"host": self._text(r.host), "uuid": self._text(r.uuid)}
            if r.throttle is not None:
                line["throttle"] = list(r.throttle)
            gpus.append(line)
        self._journal.write(self._scrub({"source": "dcgm", "url_index": i, "t": s.t, "gpus": gpus}))
        seen: set[_Key] = set()
        for r in s.readings:
            key: _Key = (i, r.host, r.index, r.uuid)
            seen.add(key)
            g = self._gpus.get(key)
            if g is None:
                g = self._gpus[key] = _Gpu(
                    url_index=i,
                    index=r.index,
                    name=r.name,
                    host=self._text(r.host),
                    uuid=self._text(r.uuid),
                    at_start=first_scrape,
                )
            elif not g.present:
                g.present = True
                self._events.emit(
                    "warning",
                    f"{self._label(g)}: back in DCGM exporter {i}'s output",
                    "info",
                    **self._data(g),
                )
            self._reading(g, r, s.t)
        for key, g in self._gpus.items():
            if key[0] == i and key not in seen and g.present:
                g.present = False
                self._events.emit(
                    "warning",
                    f"{self._label(g)}: no longer in DCGM exporter {i}'s output "
                    "(GPU lost or exporter reconfigured)",
                    "error",
                    **self._data(g),
                )

    def _reading(self, g: _Gpu, r: GpuReading, t: float) -> None:
        g.samples += 1
        g.latest = r
        g.name = r.name or g.name
        g.min_free = _lower(g.min_free, r.memory_free_mib)
        g.max_used = _higher(g.max_used, r.memory_used_mib)
        g.max_temp = _higher(g.max_temp, r.temperature_c)
        g.max_power = _higher(g.max_power, r.power_w)
        for word in r.throttle or ():
            if word not in g.throttle_seen:
                g.throttle_seen.append(word)
        self._xid(g, r, t)
        self._memory_health(g, r, t)

    def _when(self, g: _Gpu, t: float) -> str:
        """When a value already set at its first reading was read."""
        return "at start" if g.at_start and g.samples == 1 else f"when first read at {t:.1f} s"

    def _xid(self, g: _Gpu, r: GpuReading, t: float) -> None:
        xid = r.last_xid
        if xid is None:
            return
        prev, g.last_xid = g.last_xid, xid
        first = prev is None  # the baseline
        if xid == 0 or xid == prev:
            return  # nothing yet, nothing new, or the exporter restarted (back to 0)
        meaning = xid_meaning(xid, r.xid_message)
        if first:
            when = self._when(g, t)
            self._fault(
                g,
                f"{self._label(g)}: Xid {xid} — {meaning} (already set {when})",
                "warning",
                reason=f"{self._label(g)}: Xid {xid} — {meaning} was already set {when} "
                f"(DCGM exporter {g.url_index}; time unknown, not counted as a run fault)",
                effect="note",
                xid=xid,
                meaning=meaning,
                t_s=t,
                already_set=True,
            )
        else:
            self._fault(
                g,
                f"{self._label(g)}: Xid {xid} — {meaning}",
                "critical",
                reason=f"{self._label(g)}: Xid {xid} — {meaning}, seen {t:.1f} s into the "
                f"run (DCGM exporter {g.url_index})",
                effect="failed",
                xid=xid,
                meaning=meaning,
                t_s=t,
                already_set=False,
            )
        event = {"t_s": round(t, 3), "xid": xid, "meaning": meaning, "already_set": first}
        if len(g.xid_events) < MAX_XID_EVENTS_PER_GPU:
            g.xid_events.append(event)
        else:
            g.xid_events_dropped += 1

    def _memory_health(self, g: _Gpu, r: GpuReading, t: float) -> None:
        ecc = r.ecc_dbe_volatile if r.ecc_dbe_volatile is not None else r.ecc_dbe_aggregate
        which = "volatile" if r.ecc_dbe_volatile is not None else "aggregate"
        if ecc is not None:
            if g.ecc_last is not None and ecc > g.ecc_last:
                d = ecc - g.ecc_last
                g.ecc_new += d
                msg = f"{self._label(g)}: {d} new uncorrectable ECC error(s) ({which} total {ecc})"
                self._fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, seen {t:.1f} s into the run",
                    effect="failed",
                    ecc_new=d,
                    ecc_total=ecc,
                    t_s=t,
                )
            g.ecc_last = ecc  # a drop (driver reload) only moves the baseline
        rows = r.remapped_rows_uncorrectable
        if rows is not None:
            if g.rows_last is not None and rows > g.rows_last:
                d = rows - g.rows_last
                g.rows_new += d
                msg = (
                    f"{self._label(g)}: {d} more row(s) remapped after uncorrectable "
                    f"memory errors (total {rows})"
                )
                self._fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, seen {t:.1f} s into the run",
                    effect="failed",
                    remapped_rows_new=d,
                    remapped_rows_total=rows,
                    t_s=t,
                )
            g.rows_last = rows
        failed = r.row_remap_failure
        if failed is not None:
            if failed and not g.remap_failed:
                msg = f"{self._label(g)}: row remapping failed — the GPU needs service"
                if g.remap_failed is None:  # the baseline
                    when = self._when(g, t)
                    self._fault(
                        g,
                        f"{msg} (already set {when})",
                        "warning",
                        reason=f"{msg} (already set {when}; not counted as a run fault)",
                        effect="note",
                        t_s=t,
                        already_set=True,
                    )
                else:
                    self._fault(
                        g,
                        msg,
                        "critical",
                        reason=f"{msg}, seen {t:.1f} s into the run",
                        effect="failed",
                        t_s=t,
                    )
            g.remap_failed = failed

    def _fault(
        self,
        g: _Gpu,
        message: str,
        severity: Severity,
        *,
        reason: str,
        effect: _Effect,
        **data: Any,
    ) -> None:
        g.faults += 1
        self._events.emit("fault", message, severity, **(self._data(g) | data))
        if len(self._reasons) < MAX_REASONS:
            self._reasons.append(Reason(code="gpu_fault", effect=effect, message=reason))
        else:
            self._reasons_dropped[effect] += 1

    def _label(self, g: _Gpu) -> str:
        who = f"GPU {g.index}" if g.index is not None else f"GPU {g.uuid}"
        parts = [p for p in (g.name, f"host {g.host}" if g.host else None) if p]
        return f"{who} ({', '.join(parts)})" if parts else who

    def _data(self, g: _Gpu) -> dict[str, Any]:
        return {
            "source": "dcgm",
            "url_index": g.url_index,
            "gpu": g.index,
            "name": g.name,
            "host": g.host,
            "uuid": g.uuid,
        }

    # -- outputs -------------------------------------------------------------------------
    def view(self) -> list[dict[str, object]]:
        """Latest values per GPU, for the snapshot's ``telemetry["gpus"]``. ``status``:
        ``ok``; ``scrape failed`` (with ``error``; no values, nothing stale); ``missing``
        (the GPU dropped out of its exporter's output); ``no data yet``. A value the
        exporter does not export is None; ``throttle`` is None when the reasons are not
        exported and an empty list when none is active."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            mine = [g for key, g in self._gpus.items() if key[0] == i]
            if s is None:
                out.append({"url_index": i, "status": "no data yet"})
                continue
            if s.error is not None:
                err = self._text(s.error)
                if not mine:
                    out.append({"url_index": i, "status": "scrape failed", "error": err})
                for g in mine:
                    out.append(self._ident(g) | {"status": "scrape failed", "error": err})
                continue
            for g in mine:
                r = g.latest
                if not g.present or r is None:
                    out.append(self._ident(g) | {"status": "missing"})
                    continue
                out.append(
                    self._ident(g)
                    | {
                        "status": "ok",
                        "t": s.t,
                        "memory_free_mib": r.memory_free_mib,
                        "memory_used_mib": r.memory_used_mib,
                        "memory_total_mib": r.memory_total_mib,
                        "util_percent": r.util_percent,
                        "temperature_c": r.temperature_c,
                        "power_w": r.power_w,
                        "power_limit_w": r.power_limit_w,
                        "sm_clock_mhz": r.sm_clock_mhz,
                        "throttle": list(r.throttle) if r.throttle is not None else None,
                        "last_xid": r.last_xid,
                        "faults": g.faults,
                    }
                )
        return out

    def _ident(self, g: _Gpu) -> dict[str, object]:
        return {"url_index": g.url_index, "index": g.index, "name": g.name, "host": g.host}

    def summary(self) -> list[dict[str, object]]:
        """Per GPU, over the whole watch: extremes (None: never exported), Xid changes,
        new uncorrectable ECC errors and remapped rows, throttle reasons seen, samples.
        An exporter that never gave a GPU has one entry with ``status`` "no data"."""
        out: list[dict[str, object]] = []
        for i in range(len(self.urls)):
            mine = [g for key, g in self._gpus.items() if key[0] == i]
            if not mine:
                s = self.latest[i]
                out.append(
                    {
                        "url_index": i,
                        "status": "no data",
                        "scrapes": self.scrapes[i],
                        "scrape_errors": self.errors[i],
                        "error": self._text(s.error) if s is not None else None,
                    }
                )
            for g in mine:
                out.append(
                    self._ident(g)
                    | {
                        "uuid": g.uuid,
                        "min_free_mib": g.min_free,
                        "max_used_mib": g.max_used,
                        "max_temp_c": g.max_temp,
                        "max_power_w": g.max_power,
                        "last_xid": g.last_xid,
                        "xid_events": list(g.xid_events),
                        "xid_events_dropped": g.xid_events_dropped,
                        "ecc_new": g.ecc_new if g.ecc_last is not None else None,
                        "remapped_rows_new": g.rows_new if g.rows_last is not None else None,
                        "remap_failed": g.remap_failed,
                        "throttle_seen": list(g.throttle_seen),
                        "samples": g.samples,
                        "scrape_errors": self.errors[i],
                    }
                )
        return out

    def identity(self) -> list[dict[str, object]]:
        """The GPUs seen so far (for the record's identity ``gpus``), scrubbed."""
        return [self._ident(g) | {"uuid": g.uuid, "source": "dcgm"} for g in self._gpus.values()]

    def fault_reasons(self) -> list[Reason]:
        """One reason per GPU fault, for the verdict: ``failed`` for an Xid, ECC or row
        remapping fault seen during the run; ``note`` for one already set at its first
        reading. Code ``gpu_fault``."""
        out = list(self._reasons)
        for effect, n in self._reasons_dropped.items():
            if n:
                out.append(
                    Reason(
                        code="gpu_fault",
                        effect=effect,
                        message=f"{n} more GPU fault(s) not listed (see events.jsonl)",
                    )
                )
        return out


def _lower(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b < a else a


def _higher(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b > a else a
