"""NVML's faults: a GPU NVML says is lost, and what the Xid watcher thread queued, turned
into the ledger's faults and warnings on the loop.

A GPU NVML reports lost (``GpuIsLost``/``ResetRequired``) is one critical fault; one lost
already at the first read is a note. Each Xid event is a critical fault that fails the
run (``GpuLedger.xid_event``). A double-bit ECC event is a fault only on a GPU whose ECC
counter cannot be read (else the counter's growth reports it, with the count, on the next
read); a single-bit one is a warning. What the watcher could not do — register a GPU,
wait on the set, keep every event — is said once, as a warning: Xids then come only from
the server log.
"""

from __future__ import annotations

from probes.nvml import NvmlReading
from probes.nvml_events import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID,
    NvmlEvent,
    XidEventWatcher,
)
from soak.record.events import EventLog
from soak.watch.gpu.ledger import GpuLedger, GpuState


class NvmlFaults:
    """The NVML watch's faults into its :class:`GpuLedger`: lost GPUs (:meth:`lost`) and
    the events an :class:`XidEventWatcher` queued (:meth:`drain`)."""

    def __init__(self, ledger: GpuLedger, events: EventLog, origin_ns: int) -> None:
        self._ledger = ledger
        self._events = events
        self._origin_ns = origin_ns
        self._support_noted = False
        self._dropped_noted = 0
        self._wait_error_noted = False

    def lost(self, g: GpuState, r: NvmlReading, t: float) -> None:
        """NVML says this GPU is lost (the reading ``r`` has ``lost`` set): one fault, the
        first time."""
        if g.status == "lost":
            return
        g.status = "lost"
        why = r.lost_reason or "GPU is lost"
        msg = (
            f"{self._ledger.label(g)}: lost — NVML says {why!r} "
            "(fallen off the bus or needs a reset)"
        )
        if g.samples == 0 and g.at_start:
            self._ledger.fault(
                g,
                f"{msg} (already at start)",
                "warning",
                reason=f"{msg}, already at start (not counted as a run fault)",
                effect="note",
                lost=True,
                kind="gpu_lost",
                t_s=t,
                already_set=True,
            )
        else:
            self._ledger.fault(
                g,
                msg,
                "critical",
                reason=f"{msg}, {self._ledger.when_run(t)}",
                effect="failed",
                lost=True,
                kind="gpu_lost",
                t_s=t,
            )

    def drain(self, w: XidEventWatcher) -> int:
        """Turn the watcher's queued events into faults now; how many there were."""
        if not self._support_noted and w.ready.is_set():
            self._support_noted = True
            self._note_support(w)
        events = w.drain()
        for ev in events:
            self._event(ev)
        if w.wait_errors and not self._wait_error_noted:
            self._wait_error_noted = True
            self._events.emit(
                "warning",
                f"GPU telemetry: NVML Xid event wait failing ({w.error}); "
                "Xids may be missed (the server log still shows them)",
                "warning",
                source="nvml",
            )
        if w.dropped > self._dropped_noted:
            self._events.emit(
                "warning",
                f"GPU telemetry: {w.dropped - self._dropped_noted} NVML event(s) dropped "
                "(queue full)",
                "warning",
                source="nvml",
            )
            self._dropped_noted = w.dropped
        return len(events)

    def _note_support(self, w: XidEventWatcher) -> None:
        if w.error is not None and not w.registered:
            self._events.emit(
                "warning",
                f"GPU telemetry: NVML Xid events unavailable ({w.error}); "
                "Xids only from the server log",
                "warning",
                source="nvml",
            )
            return
        for index in w.not_supported:
            g = self._ledger.gpus.get(index)
            who = self._ledger.label(g) if g is not None else f"GPU {index}"
            self._events.emit(
                "warning",
                f"GPU telemetry: {who} does not deliver Xid events through NVML; "
                "its Xids only from the server log",
                "warning",
                source="nvml",
                gpu=index,
            )

    def _event(self, ev: NvmlEvent) -> None:
        t = (ev.perf_ns - self._origin_ns) / 1e9
        g = self._ledger.gpus.get(ev.gpu)
        if g is None:
            r = NvmlReading(host=None, index=ev.gpu, uuid=None, name=None)
            g = self._ledger.add(ev.gpu, r, at_start=False, where="NVML", tag={"source": "nvml"})
        if ev.event_type == EVENT_XID:
            self._ledger.xid_event(g, ev.data, t)
        elif ev.event_type == EVENT_DOUBLE_BIT_ECC:
            if g.ecc_last is None:  # else the counter reports it on the next read
                msg = f"{self._ledger.label(g)}: double-bit (uncorrectable) ECC error"
                self._ledger.fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, {self._ledger.when_run(t)} (NVML event)",
                    effect="failed",
                    kind="ecc_uncorrectable",
                    t_s=t,
                )
        elif ev.event_type == EVENT_SINGLE_BIT_ECC:
            self._events.emit(
                "warning",
                f"{self._ledger.label(g)}: single-bit (corrected) ECC error",
                "warning",
                **self._ledger.data(g),
                t_s=t,
            )
