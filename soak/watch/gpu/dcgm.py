"""Watches the GPUs through DCGM exporters during the run: memory, heat, power, faults.

One task scrapes every exporter at once and then sleeps the rest of the interval; each
scrape is cut after ``soak.watch.periodic.poll_timeout`` (shorter than the interval), so a hung
exporter costs one missed sample a round and never piles scrapes up. Each round counts
toward every exporter's coverage of the load (``soak.judge.coverage``). Each
sample is one ``telemetry.jsonl`` line; the latest readings go into snapshots
(:meth:`DcgmWatch.view`); the extremes over the whole run, the faults and the throttle
reasons seen go into the record (:meth:`DcgmWatch.summary`); the faults also reach the
verdict (:meth:`DcgmWatch.fault_reasons`).

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

These per-GPU rules, and the snapshot / record / identity entries, are
:class:`soak.watch.gpu.ledger.GpuLedger`'s (shared with the NVML watch); this module keeps the
scraping, the scrape trouble and the GPUs missing from an exporter's output.

Scrape trouble is a ``warning`` event once per change (failing / answering again), and a
GPU that drops out of its exporter's output (Xid 79, GPU fell off the bus) is one too.
GPU UUIDs and hostnames pass through ``scrub`` (the redactor) before anything is written.

The exporters' pages are parsed off the event loop when the runner passes a
``soak.watch.parse_worker`` helper (as the engine watch does); a helper that hung or died is a
failed scrape of that exporter with the helper's why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import httpx

from probes.dcgm import DcgmSample, dcgm_sample, fetch_dcgm, scrape_dcgm
from probes.handoff import ParseUnavailable
from soak.judge.coverage import Coverage, LoadWindow
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.record.models import Reason
from soak.watch.gpu.ledger import GpuLedger, GpuState
from soak.watch.parse_worker import ParseWorker
from soak.watch.periodic import every, poll_timeout

_Key = tuple[int, str | None, int | None, str | None]
"""(url_index, host, gpu index, UUID) as exported (unscrubbed; never written)."""


class DcgmWatch:
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
        ignore_xid: Iterable[int] = (),
        when: Callable[[float], str] = lambda t: f"at {t:.1f} s",
        window: LoadWindow | None = None,
        parser: ParseWorker | None = None,
    ) -> None:
        self.urls = urls
        self.interval_s = interval_s
        self.timeout_s = min(timeout_s, poll_timeout(interval_s))
        """Bound of one scrape (shorter than the interval)."""
        self.cover = Coverage(
            interval_s, window or LoadWindow(), [f"exporter {i}" for i in range(len(urls))]
        )
        self.loop_errors: list[str] = []
        """Unexpected exceptions of the periodic loop (soaktop bugs: the run is INVALID)."""
        self._origin_ns = origin_ns
        self._journal = journal
        self._events = events
        self._scrub = scrub
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s))
        self.parser = parser
        """Where pages are parsed: a helper process (closed by :meth:`stop`), or None:
        on this loop."""
        if parser is not None:
            parser.stall_s = min(1.0, max(0.05, round(interval_s - self.timeout_s, 3)))
            parser.on_trouble = self._parser_trouble
        self._task: asyncio.Task[None] | None = None
        self._ledger = GpuLedger("dcgm", events, scrub, frozenset(ignore_xid), when)
        self.latest: list[DcgmSample | None] = [None] * len(urls)
        self.scrapes = [0] * len(urls)
        self.errors = [0] * len(urls)
        self._failing = [False] * len(urls)
        self._failed_run = [0] * len(urls)

    # -- scraping ------------------------------------------------------------------------
    async def scrape_all(self) -> list[DcgmSample]:
        """Scrape every exporter now, all at once, each within ``timeout_s``."""
        samples = await asyncio.gather(*(self._scrape(url) for url in self.urls))
        for i, s in enumerate(samples):
            self._take(i, s)
            self.cover.sample(f"exporter {i}", s.t, s.error)
        return list(samples)

    async def _scrape(self, url: str) -> DcgmSample:
        """One exporter: the GET within ``timeout_s``, then the parse in the helper (its
        own bound), or both on this loop without a helper."""
        t = (time.perf_counter_ns() - self._origin_ns) / 1e9
        try:
            if self.parser is None:
                return await asyncio.wait_for(
                    scrape_dcgm(self._client, url, self._origin_ns), self.timeout_s
                )
            got = await asyncio.wait_for(
                fetch_dcgm(self._client, url, self._origin_ns), self.timeout_s
            )
        except TimeoutError:
            return DcgmSample(t=t, error=f"timed out after {self.timeout_s:g} s")
        if isinstance(got, DcgmSample):
            return got
        t, body = got
        try:
            return dcgm_sample(t, await self.parser.dcgm(body))
        except (ValueError, ParseUnavailable) as e:  # the page's, or the helper's trouble
            return DcgmSample(t=t, error=str(e))

    def _parser_trouble(self, why: str) -> None:
        """The helper was lost (a warning event), or given up (also a soaktop failure)."""
        if self.parser is not None and self.parser.given_up == why:
            msg = f"GPU watch (DCGM): {why}"[:300]
            if msg not in self.loop_errors:
                self.loop_errors.append(msg)
        self._events.emit("warning", f"GPU telemetry: {why}", "warning", source="dcgm")

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """``{"dcgm": {"exporter i": entry}}`` over the load window so far."""
        return {"dcgm": self._scrub(self.cover.summary(now_s, min_expected))}

    async def _run(self) -> None:
        await every(self.interval_s, self.scrape_all, "GPU watch (DCGM)", self.loop_errors)

    def start(self) -> None:
        """Begin periodic scraping on the running loop; the parser's helper starts now, in
        the background, so it is ready long before the load."""
        if self.parser is not None:
            self.parser.prestart()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dcgm-watch")

    async def stop(self) -> None:
        """Stop scraping and close the HTTP client."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.aclose()
        if self.parser is not None:
            await self.parser.aclose()

    # -- one sample ----------------------------------------------------------------------
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
                err = self._ledger.text(s.error)
                self._events.emit(
                    "warning",
                    f"GPU telemetry: DCGM exporter {i} scrape failed: {err}",
                    "warning",
                    source="dcgm",
                    url_index=i,
                    error=err,
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
            line = asdict(r) | {
                "host": self._ledger.text(r.host),
                "uuid": self._ledger.text(r.uuid),
            }
            if r.throttle is not None:
                line["throttle"] = list(r.throttle)
            gpus.append(line)
        self._journal.write(self._scrub({"source": "dcgm", "url_index": i, "t": s.t, "gpus": gpus}))
        seen: set[_Key] = set()
        for r in s.readings:
            key: _Key = (i, r.host, r.index, r.uuid)
            seen.add(key)
            g = self._ledger.gpus.get(key)
            if g is None:
                g = self._ledger.add(
                    key, r, at_start=first_scrape, where=f"DCGM exporter {i}", tag={"url_index": i}
                )
            elif g.status == "missing":
                g.status = "ok"
                self._events.emit(
                    "warning",
                    f"{self._ledger.label(g)}: back in DCGM exporter {i}'s output",
                    "info",
                    **self._ledger.data(g),
                )
            self._ledger.reading(g, r, s.t)
        for g in self._ledger.gpus.values():
            if g.tag["url_index"] == i and g.key not in seen and g.status == "ok":
                g.status = "missing"
                # A GPU that falls off the bus (Xid 79) usually takes its Xid gauge with it:
                # this is the only sign of it here, so it fails the run like NVML's "lost".
                msg = (
                    f"{self._ledger.label(g)}: no longer in DCGM exporter {i}'s output "
                    "(GPU lost or exporter reconfigured)"
                )
                self._ledger.fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, {self._ledger.when_run(s.t)}",
                    effect="failed",
                    kind="gpu_missing",
                )

    # -- outputs -------------------------------------------------------------------------
    def _of(self, i: int) -> list[GpuState]:
        """The GPUs seen in exporter ``i``'s output, in the order first seen."""
        return [g for g in self._ledger.gpus.values() if g.tag["url_index"] == i]

    def view(self) -> list[dict[str, object]]:
        """Latest values per GPU, for the snapshot's ``telemetry["gpus"]``. ``status``:
        ``ok``; ``scrape failed`` (with ``error``; no values, nothing stale); ``missing``
        (the GPU dropped out of its exporter's output); ``no data yet``. A value the
        exporter does not export is None; ``throttle`` is None when the reasons are not
        exported and an empty list when none is active."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            mine = self._of(i)
            if s is None:
                out.append({"url_index": i, "status": "no data yet"})
                continue
            if s.error is not None:
                err = self._ledger.text(s.error)
                if not mine:
                    out.append({"url_index": i, "status": "scrape failed", "error": err})
                for g in mine:
                    out.append(self._ledger.ident(g) | {"status": "scrape failed", "error": err})
                continue
            out += [self._ledger.view_entry(g) for g in mine]
        return out

    def summary(self) -> list[dict[str, object]]:
        """Per GPU, over the whole watch: extremes (None: never exported), Xid changes,
        new uncorrectable ECC errors and remapped rows, throttle reasons seen, samples.
        An exporter that never gave a GPU has one entry with ``status`` "no data"."""
        out: list[dict[str, object]] = []
        for i in range(len(self.urls)):
            mine = self._of(i)
            if not mine:
                s = self.latest[i]
                out.append(
                    {
                        "url_index": i,
                        "status": "no data",
                        "scrapes": self.scrapes[i],
                        "scrape_errors": self.errors[i],
                        "error": self._ledger.text(s.error) if s is not None else None,
                    }
                )
            for g in mine:
                out.append(self._ledger.summary_entry(g) | {"scrape_errors": self.errors[i]})
        return out

    def identity(self) -> list[dict[str, object]]:
        """The GPUs seen so far (for the record's identity ``gpus``), scrubbed."""
        return [self._ledger.identity_entry(g) for g in self._ledger.gpus.values()]

    def fault_reasons(self) -> list[Reason]:
        """One reason per GPU fault, for the verdict: ``failed`` for an Xid, ECC or row
        remapping fault seen during the run; ``note`` for one already set at its first
        reading. Code ``gpu_fault``."""
        return self._ledger.fault_reasons()
