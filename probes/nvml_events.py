"""NVML's event stream: Xids and ECC errors, delivered by a thread of their own.

NVML's event wait blocks, so :class:`XidEventWatcher` waits in a daemon thread and queues
what arrives; the watch (``soak.watch.gpu.nvml``) drains the queue on its loop. The GPUs
come from an open :class:`probes.nvml.NvmlReader` (its ``devices``); NVML must stay open
while the watcher runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from probes.nvml import NvmlDevice, missing_function_errors

EVENT_XID: int = pynvml.nvmlEventTypeXidCriticalError
EVENT_DOUBLE_BIT_ECC: int = pynvml.nvmlEventTypeDoubleBitEccError
EVENT_SINGLE_BIT_ECC: int = pynvml.nvmlEventTypeSingleBitEccError
"""Corrected errors: not registered by default (noise, not faults)."""
DEFAULT_EVENT_TYPES = EVENT_XID | EVENT_DOUBLE_BIT_ECC

_EVENT_KIND = {
    EVENT_XID: "xid",
    EVENT_DOUBLE_BIT_ECC: "double-bit ecc",
    EVENT_SINGLE_BIT_ECC: "single-bit ecc",
}


def _handle_key(handle: Any) -> Any:
    """A comparable identity for a device handle: the address for a ctypes pointer (the
    handle in an event is a new pointer object to the same device), else the handle."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


@dataclass(frozen=True)
class NvmlEvent:
    """One NVML event, as the watcher thread received it."""

    perf_ns: int
    """``time.perf_counter_ns()`` when the wait returned (the runner's latency clock)."""
    gpu: int | None
    """The GPU's NVML index; None if the event's handle matched no known GPU."""
    event_type: int
    data: int
    """``eventData``: the Xid number for an Xid event."""

    @property
    def kind(self) -> str:
        """ "xid", "double-bit ecc", "single-bit ecc" or "event 0x…"."""
        return _EVENT_KIND.get(self.event_type, f"event {self.event_type:#x}")


class XidEventWatcher:
    """A daemon thread that waits on an NVML event set and queues what arrives.

    The thread creates the set, registers each GPU (a GPU that does not support an event
    type is registered for the types it does support; one supporting none is listed in
    ``not_supported``), then waits ``timeout_ms`` at a time so ``stop()`` returns quickly.
    ``NVMLError_Timeout`` is the normal "nothing happened". Events that happened before
    registration are never delivered (NVML's rule). The queue is bounded (``max_queued``);
    events beyond it are counted in ``dropped``. NVML must stay open until ``stop()``.
    """

    def __init__(
        self,
        devices: Sequence[NvmlDevice],
        event_types: int = DEFAULT_EVENT_TYPES,
        timeout_ms: int = 500,
        max_queued: int = 10_000,
    ) -> None:
        self.devices = [d for d in devices if not d.lost and d.handle is not None]
        self.event_types = event_types
        self.timeout_ms = timeout_ms
        self.registered: dict[int, int] = {}
        """GPU index → event types registered for it."""
        self.not_supported: list[int] = []
        """GPUs that support none of the event types."""
        self.error: str | None = None
        """Why the watcher could not watch at all (set creation failed), or the last error
        of the wait other than a timeout."""
        self.wait_errors = 0
        self.dropped = 0
        self.ready = threading.Event()
        """Set once registration is done (or failed)."""
        self._queue: queue.Queue[NvmlEvent] = queue.Queue(maxsize=max_queued)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._by_handle = {_handle_key(d.handle): d.index for d in self.devices}

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.5) -> bool:
        """Ask the thread to end and join it; True when it has ended."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def drain(self) -> list[NvmlEvent]:
        """Every event queued so far (non-blocking)."""
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    # -- the thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            es = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            self.error = f"nvmlEventSetCreate failed: {e}"
            self.ready.set()
            return
        try:
            for dev in self.devices:
                self._register(dev, es)
            self.ready.set()
            if self.registered:
                self._loop(es)
        finally:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(es)
            self.ready.set()

    def _register(self, dev: NvmlDevice, es: Any) -> None:
        wanted = self.event_types
        try:
            pynvml.nvmlDeviceRegisterEvents(dev.handle, wanted, es)
            self.registered[dev.index] = wanted
            return
        except pynvml.NVMLError_NotSupported:
            pass  # maybe one of the types only: try them one by one
        except pynvml.NVMLError:
            self.not_supported.append(dev.index)  # lost, no permission...: nothing to watch
            return
        got = 0
        bit = 1
        while bit <= wanted:
            if wanted & bit:
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlDeviceRegisterEvents(dev.handle, bit, es)
                    got |= bit
            bit <<= 1
        if got:
            self.registered[dev.index] = got
        else:
            self.not_supported.append(dev.index)

    def _loop(self, es: Any) -> None:
        wait: Callable[[Any, int], Any] = pynvml.nvmlEventSetWait_v2
        while not self._stop.is_set():
            try:
                data = wait(es, self.timeout_ms)
            except pynvml.NVMLError_Timeout:
                continue
            except missing_function_errors():
                if wait is pynvml.nvmlEventSetWait:
                    self.error = "nvmlEventSetWait is not available"
                    return
                wait = pynvml.nvmlEventSetWait
                continue
            except pynvml.NVMLError as e:
                self.wait_errors += 1
                self.error = f"nvmlEventSetWait failed: {e}"
                self._stop.wait(self.timeout_ms / 1000)  # no busy loop on a broken set
                continue
            ev = NvmlEvent(
                perf_ns=time.perf_counter_ns(),
                gpu=self._by_handle.get(_handle_key(getattr(data, "device", None))),
                event_type=int(data.eventType),
                data=int(data.eventData),
            )
            try:
                self._queue.put_nowait(ev)
            except queue.Full:
                self.dropped += 1
