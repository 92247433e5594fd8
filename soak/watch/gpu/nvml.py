"""Watches the local GPUs through NVML during the run: memory, heat, power, faults.

The local twin of :class:`soak.watch.gpu.dcgm.DcgmWatch` (DCGM exporters): the same snapshot
entries (:meth:`NvmlWatch.view`), record entries (:meth:`NvmlWatch.summary`), identity
entries and verdict reasons (:meth:`NvmlWatch.fault_reasons`), so the runner can hold
either. The per-GPU bookkeeping both need — extremes, throttle words seen, Xid and memory
faults as events and reasons, the entries — is :class:`soak.watch.gpu.ledger.GpuLedger`.

Every NVML call is blocking and runs in a daemon thread of its own
(:mod:`soak.watch.gpu.threads`), never on the event loop: a driver that hangs (it does,
after Xid 79) stalls this watch — reported as a warning, with the GPUs' values withdrawn —
but neither the loop nor the runner's exit.
One read at a time: the next read starts one interval after the last one began, or when it
returns if it took longer (no pile-up). Each read counts toward the load's coverage
(``soak.judge.coverage``, key ``local GPUs``; a stalled read counts as answered only once, so
the intervals it hung through show as missing); NVML unavailable is absent, not lost.

- **No NVML** (no driver, init failure, no GPU): one ``warning`` event "GPU telemetry: NVML
  unavailable: …", then nothing; ``view()`` and ``summary()`` say ``unavailable`` with the
  reason. No number is ever made up.
- **Xid.** NVML delivers Xids as events (:class:`probes.nvml_events.XidEventWatcher`, its
  own thread; turned into faults by :mod:`soak.watch.gpu.nvml_faults`); each one is a
  critical ``fault`` event and fails the run. Events that happened before registration
  are never delivered (NVML's rule), so there is no "already set".
  A double-bit ECC event is a fault only on a GPU whose ECC counter cannot be read (else
  the counter's growth reports it, with the count, on the next read).
- **Lost GPU** (``GpuIsLost``/``ResetRequired``): one critical fault
  (:mod:`soak.watch.gpu.nvml_faults`); a GPU already lost at the first read is a note.
- **Memory.** Growth of the volatile uncorrected ECC count, of rows remapped after
  uncorrectable errors, and row remapping turning failed: as in ``DcgmWatch``.

A field NVML does not support is None (and listed in the summary's ``not_supported``);
a field NVML fails to read otherwise is None and one ``warning`` per GPU and field.
Each read is one ``telemetry.jsonl`` line ``{"source": "nvml", "t": …, "gpus": […]}``.
GPU UUIDs, PCI ids and process names pass through ``scrub`` before anything is written.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict
from typing import Any, Literal

from probes.nvml import NvmlReader, NvmlReading, NvmlUnavailable
from probes.nvml_events import XidEventWatcher
from soak.judge.coverage import Coverage, LoadWindow
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.record.models import Reason
from soak.watch.gpu.ledger import GpuLedger
from soak.watch.gpu.nvml_faults import NvmlFaults
from soak.watch.gpu.threads import Calls, in_daemon_thread, reap
from soak.watch.periodic import every

COVERAGE_KEY = "local GPUs"


# --- the watch --------------------------------------------------------------------------

_Status = Literal["not started", "starting", "ok", "unavailable", "stopped"]


class NvmlWatch:
    """Periodic NVML reads of the local GPUs and their Xid events; faults as events,
    extremes for the record. Same outputs as :class:`soak.watch.gpu.dcgm.DcgmWatch`."""

    def __init__(
        self,
        origin_ns: int,
        journal: JsonlWriter,
        events: EventLog,
        interval_s: float = 1.0,
        scrub: Callable[[Any], Any] = lambda v: v,
        *,
        open_timeout_s: float = 20.0,
        stall_warn_s: float = 10.0,
        xid_poll_s: float = 0.25,
        reader: NvmlReader | None = None,
        ignore_xid: Iterable[int] = (),
        when: Callable[[float], str] = lambda t: f"at {t:.1f} s",
        window: LoadWindow | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.cover = Coverage(interval_s, window or LoadWindow())
        """Expects samples only once NVML opened (unavailable: absent, not lost)."""
        self.loop_errors: list[str] = []
        """Unexpected exceptions of the periodic loop (soaktop bugs: the run is INVALID)."""
        self.open_timeout_s = open_timeout_s
        self.stall_warn_s = stall_warn_s
        self.xid_poll_s = xid_poll_s
        self.status: _Status = "not started"
        self.reason: str | None = None
        """Why NVML is unavailable."""
        self.reads = 0
        self.read_errors = 0
        self._origin_ns = origin_ns
        self._journal = journal
        self._events = events
        self._scrub = scrub
        self._reader = reader if reader is not None else NvmlReader()
        self._ledger = GpuLedger("nvml", events, scrub, frozenset(ignore_xid), when)
        self._xids: XidEventWatcher | None = None
        self._faults = NvmlFaults(self._ledger, events, origin_ns)
        self._task: asyncio.Task[None] | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._read_fut: asyncio.Future[list[NvmlReading]] | None = None
        self._opened = asyncio.Event()
        # the open thread and the loop agree under this lock on who closes NVML
        self._lock = threading.Lock()
        self._open_done = False
        self._abandoned = False
        self._error: str | None = None
        """The current read failure (None: the last read worked)."""
        self._failed_run = 0
        self._stalled = False
        self._warned_fields: set[tuple[int | None, str]] = set()
        self._latest: dict[Hashable, NvmlReading] = {}
        self._not_supported: dict[Hashable, tuple[str, ...]] = {}
        self._threads: Calls = []
        """The NVML call threads started, with their futures (pruned as they end)."""

    def now_s(self) -> float:
        return (time.perf_counter_ns() - self._origin_ns) / 1e9

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Open NVML (in a thread) and then read periodically, on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nvml-watch")

    async def ready(self) -> bool:
        """Wait until the opening is settled; True when NVML is open."""
        await self._opened.wait()
        return self.status == "ok"

    async def open(self) -> bool:
        """Open NVML and start the Xid watcher; on failure, one warning event and False."""
        if self.status != "not started":
            return self.status == "ok"
        self.status = "starting"
        try:
            ok = await self._open()
        finally:
            self._opened.set()
        return ok

    async def _open(self) -> bool:
        def open_in_thread() -> None:
            self._reader.open()
            with self._lock:
                self._open_done = True
                abandoned = self._abandoned
            if abandoned:  # the loop gave up waiting (or the watch stopped)
                self._reader.close()

        fut = in_daemon_thread(open_in_thread, "nvml-open", self._threads)
        try:
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.open_timeout_s)
            except TimeoutError:
                with self._lock:
                    finished = self._open_done
                    self._abandoned = not finished
                if not finished:
                    return self._unavailable(
                        f"NVML did not answer within {self.open_timeout_s:g} s (driver hung?)"
                    )
                await fut  # it finished just now
        except NvmlUnavailable as e:
            return self._unavailable(str(e))
        except Exception as e:  # a bug in the binding must not take the run down
            return self._unavailable(f"NVML could not be opened: {type(e).__name__}: {e}")
        self.status = "ok"
        self.cover.add_key(COVERAGE_KEY)
        t = self.now_s()
        for dev in self._reader.devices:
            r = NvmlReading(host=None, index=dev.index, uuid=dev.uuid, name=dev.name)
            self._ledger.add(dev.index, r, at_start=True, where="NVML", tag={"source": "nvml"})
        self._journal.write(
            self._scrub(
                {
                    "source": "nvml",
                    "t": t,
                    "driver_version": self._reader.driver_version,
                    "cuda_driver_version": self._reader.cuda_driver_version,
                    "devices": [
                        {
                            "index": d.index,
                            "name": d.name,
                            "uuid": d.uuid,
                            "pci_bus_id": d.pci_bus_id,
                            "memory_total_mib": d.memory_total_mib,
                        }
                        for d in self._reader.devices
                    ],
                }
            )
        )
        self._xids = XidEventWatcher(self._reader.devices)
        self._xids.start()
        return True

    def _unavailable(self, reason: str) -> bool:
        self.status = "unavailable"
        self.reason = self._ledger.text(reason)
        self._journal.write(
            self._scrub(
                {"source": "nvml", "t": self.now_s(), "status": "unavailable", "error": reason}
            )
        )
        self._events.emit(
            "warning",
            f"GPU telemetry: NVML unavailable: {reason}",
            "warning",
            source="nvml",
            error=self.reason,
        )
        return False

    async def _run(self) -> None:
        if not await self.open():
            return
        self._drain_task = asyncio.get_running_loop().create_task(
            self._drain_loop(), name="nvml-xid-drain"
        )
        await every(self.interval_s, self.sample, "GPU watch (NVML)", self.loop_errors)

    async def _drain_loop(self) -> None:
        while True:
            self.drain_events()
            await asyncio.sleep(self.xid_poll_s)

    async def stop(self) -> None:
        """Stop reading, stop the Xid thread (joined within ~1 s), shut NVML down."""
        with self._lock:
            self._abandoned = True  # an open still in its thread closes NVML itself
            opened = self._open_done
        for task in (self._task, self._drain_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._drain_task = None
        self._opened.set()
        if self.status == "ok":
            self.drain_events()  # what arrived since the last tick
        if self._xids is not None:
            await in_daemon_thread(self._xids.stop, "nvml-xid-stop", self._threads)
            self.drain_events()
        if opened and self._reader.is_open:
            read = self._read_fut
            if read is not None and not read.done():  # let a slow read finish first
                await asyncio.wait({read}, timeout=2.0)
            if read is None or read.done():
                if read is not None and not read.cancelled():
                    read.exception()  # retrieved: a late failure is not "never retrieved"
                close = in_daemon_thread(self._reader.close, "nvml-close", self._threads)
                await asyncio.wait({close}, timeout=2.0)
        if self.status in ("ok", "starting"):
            self.status = "stopped"
        reap(self._threads)

    # -- one read ------------------------------------------------------------------------
    async def sample(self) -> list[NvmlReading] | None:
        """Read every GPU now (in a thread) and take the readings; None if the read
        failed (a warning event once per change)."""
        if self.status != "ok":
            return None
        t = self.now_s()
        fut = self._read_fut = in_daemon_thread(self._reader.read, "nvml-read", self._threads)
        try:
            readings = await self._await_read(fut, t)
        except Exception as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            self.cover.sample(COVERAGE_KEY, t, self._ledger.text(error))
            self._read_failed(t, error)
            return None
        self.cover.sample(COVERAGE_KEY, t)
        self._take(t, readings)
        return readings

    async def _await_read(
        self, fut: asyncio.Future[list[NvmlReading]], t: float
    ) -> list[NvmlReading]:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.stall_warn_s)
        except TimeoutError:
            pass
        self._stalled = True
        self._events.emit(
            "warning",
            f"GPU telemetry: an NVML read has not returned after {self.stall_warn_s:g} s "
            "(driver hung?); GPU values withdrawn until it does",
            "error",
            source="nvml",
        )
        await asyncio.wait({fut})  # a cancel (stop) leaves the thread to finish alone
        self._stalled = False
        self._events.emit(
            "warning",
            f"GPU telemetry: the NVML read returned after {self.now_s() - t:.1f} s",
            "info",
            source="nvml",
        )
        return fut.result()

    def _read_failed(self, t: float, error: str) -> None:
        self.reads += 1
        self.read_errors += 1
        self._failed_run += 1
        self._journal.write(self._scrub({"source": "nvml", "t": t, "error": error}))
        if self._error is None:
            self._events.emit(
                "warning",
                f"GPU telemetry: NVML read failed: {self._ledger.text(error)}",
                "warning",
                source="nvml",
                error=self._ledger.text(error),
            )
        self._error = error

    def _take(self, t: float, readings: list[NvmlReading]) -> None:
        self.reads += 1
        if self._error is not None:
            n, self._failed_run, self._error = self._failed_run, 0, None
            self._events.emit(
                "warning",
                f"GPU telemetry: NVML reads again after {n} failed read(s)",
                "info",
                source="nvml",
                failed_reads=n,
            )
        self._journal.write(
            self._scrub({"source": "nvml", "t": t, "gpus": [_line(r) for r in readings]})
        )
        for r in readings:
            g = self._ledger.gpus.get(r.index)
            if g is None:  # not listed at open (cannot happen with one reader): keep it
                g = self._ledger.add(
                    r.index, r, at_start=False, where="NVML", tag={"source": "nvml"}
                )
            self._latest[r.index] = r
            if not r.lost:
                self._not_supported[r.index] = r.not_supported
            if r.lost:
                self._faults.lost(g, r, t)
                continue
            self._ledger.reading(g, r, t)
            for name, err in r.field_errors.items():
                if (r.index, name) not in self._warned_fields:
                    self._warned_fields.add((r.index, name))
                    self._events.emit(
                        "warning",
                        f"GPU telemetry: {self._ledger.label(g)}: NVML could not read "
                        f"{name}: {err}",
                        "warning",
                        **self._ledger.data(g),
                        field=name,
                        error=err,
                    )

    # -- Xid events ----------------------------------------------------------------------
    def drain_events(self) -> int:
        """Turn the Xid watcher's queued events into faults now; how many there were."""
        return self._faults.drain(self._xids) if self._xids is not None else 0

    # -- outputs -------------------------------------------------------------------------
    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """``{"nvml": {"local GPUs": entry}}`` over the load window so far (empty when
        NVML never opened: absent, said once in ``gpu_sources``)."""
        return {"nvml": self.cover.summary(now_s, min_expected)}

    def _whole(self, status: str) -> dict[str, object]:
        out: dict[str, object] = {"source": "nvml", "status": status}
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    def view(self) -> list[dict[str, object]]:
        """Latest values per GPU for the snapshot's ``telemetry["gpus"]`` (the entries of
        ``DcgmWatch.view`` plus ``source``, ``memory_reserved_mib`` and ``processes``).
        ``status``: ``ok``; ``lost``; ``read failed`` / ``read stalled`` (with ``error``; no
        values, nothing stale); ``no data yet``. The whole source ``unavailable`` (with
        ``reason``) or not started yet is one entry with ``no data yet``."""
        if self.status == "unavailable":
            return [self._whole("unavailable")]
        if not self._ledger.gpus:
            return [self._whole("no data yet")]
        trouble = (
            "read stalled" if self._stalled else "read failed" if self._error is not None else None
        )
        out: list[dict[str, object]] = []
        for key, g in self._ledger.gpus.items():
            if trouble is not None and g.status == "ok":
                why = "NVML read not returned" if self._stalled else self._ledger.text(self._error)
                out.append(self._ledger.ident(g) | {"status": trouble, "error": why})
                continue
            entry = self._ledger.view_entry(g)
            r = self._latest.get(key)
            if g.status == "lost":
                entry["reason"] = r.lost_reason if r is not None else None
            elif entry["status"] == "ok" and r is not None:
                entry["memory_reserved_mib"] = r.memory_reserved_mib
                entry["processes"] = (
                    None if r.processes is None else [self._scrub(asdict(p)) for p in r.processes]
                )
            out.append(entry)
        return out

    def summary(self) -> list[dict[str, object]]:
        """Per GPU over the whole watch, for the record's ``telemetry["gpus"]``: the
        entries of ``DcgmWatch.summary`` (``scrape_errors`` counts failed NVML reads) plus
        ``status`` (ok / lost), ``pci_bus_id`` and ``not_supported``. NVML unavailable:
        one entry ``{"source": "nvml", "status": "unavailable", "reason": …}``; never
        opened: ``{"source": "nvml", "status": "no data"}``."""
        if self.status == "unavailable":
            return [self._whole("unavailable")]
        if not self._ledger.gpus:
            return [self._whole("no data")]
        out: list[dict[str, object]] = []
        for key, g in self._ledger.gpus.items():
            out.append(
                self._ledger.summary_entry(g)
                | {
                    "scrape_errors": self.read_errors,
                    "status": g.status,
                    "pci_bus_id": self._pci(key),
                    "not_supported": list(self._not_supported.get(key, ())),
                }
            )
        return out

    def identity(self) -> list[dict[str, object]]:
        """The GPUs (for the record's identity ``gpus``), scrubbed: index, name, UUID, PCI
        bus id, memory total, driver and CUDA driver versions. Empty without NVML."""
        devices = {d.index: d for d in self._reader.devices}
        out: list[dict[str, object]] = []
        for key, g in self._ledger.gpus.items():
            d = devices.get(key) if isinstance(key, int) else None
            out.append(
                self._ledger.identity_entry(g)
                | {
                    "pci_bus_id": self._pci(key),
                    "memory_total_mib": d.memory_total_mib if d is not None else None,
                    "driver_version": self._reader.driver_version,
                    "cuda_driver_version": self._reader.cuda_driver_version,
                }
            )
        return out

    def _pci(self, key: Hashable) -> str | None:
        for d in self._reader.devices:
            if d.index == key:
                return self._ledger.text(d.pci_bus_id)
        return None

    def fault_reasons(self) -> list[Reason]:
        """One reason per GPU fault, for the verdict (code ``gpu_fault``): ``failed`` for an
        Xid, a lost GPU, ECC or row-remapping fault during the run; ``note`` for one there
        before the first read."""
        return self._ledger.fault_reasons()


def _line(r: NvmlReading) -> dict[str, Any]:
    line = asdict(r)
    if r.throttle is not None:
        line["throttle"] = list(r.throttle)
    line["not_supported"] = list(r.not_supported)
    if r.processes is not None:
        line["processes"] = [asdict(p) for p in r.processes]
    return line
