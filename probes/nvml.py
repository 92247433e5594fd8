"""GPU telemetry from the local NVIDIA driver through NVML (``nvidia-ml-py``, ``pynvml``).

The same vocabulary as the DCGM source (:class:`probes.gpu_reading.GpuReading`: its field
names, units and throttle words): an :class:`NvmlReading` *is* a ``GpuReading``
plus what only NVML can say (PCI bus id, reserved memory, the compute processes, whether
the GPU is lost). Units: memory in MiB (NVML gives bytes), power in W (NVML gives mW),
clocks in MHz, temperature in °C.

Every field is read on its own: a field NVML does not support on this GPU or driver is
``None`` and named in ``not_supported``; any other NVML error on one field is ``None`` and
its words land in ``field_errors``; no field's trouble affects another. A GPU that NVML
says is lost (``GpuIsLost``, or ``ResetRequired``) comes back as a reading with
``lost=True`` and no values — reported, never raised — and is not asked again.

Nothing here invents a number: no NVML, no readings (:class:`NvmlUnavailable`).

Xid events need their own thread (NVML's event wait blocks): ``XidEventWatcher`` in
:mod:`probes.nvml_events`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil
import pynvml

from probes.gpu_reading import GpuReading, throttle_words

LIBRARY_NOT_FOUND = "NVML library not found (no NVIDIA driver on this host)"

_MIB = 1024 * 1024
_T = TypeVar("_T")


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host; the message says why, in an operator's words."""


class _GpuLost(Exception):
    """Internal: NVML said the GPU is lost (or needs a reset) while reading it."""


def _lost_errors() -> tuple[type[BaseException], ...]:
    return (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)


def _not_supported_errors() -> tuple[type[BaseException], ...]:
    # FunctionNotFound: the installed driver predates the call; the library-mismatch error
    # is pynvml's rewording of it for unversioned calls.
    return (
        pynvml.NVMLError_NotSupported,
        pynvml.NVMLError_FunctionNotFound,
        pynvml.NVMLLibraryMismatchError,
    )


def missing_function_errors() -> tuple[type[BaseException], ...]:
    """The call itself is absent (old driver or old binding): try the older call. Shared
    with :mod:`probes.nvml_events`."""
    return (
        pynvml.NVMLError_FunctionNotFound,
        pynvml.NVMLLibraryMismatchError,
        AttributeError,
    )


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    return str(v)


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on a GPU."""

    pid: int
    """As NVML reports it: the host's PID namespace. Inside a container with its own PID
    namespace this is not the container's PID (the name is then usually None)."""
    used_mib: float | None
    """GPU memory the process holds; None when NVML cannot say (e.g. in containers)."""
    name: str | None
    """The process name on this host (psutil, e.g. ``VLLM::EngineCore0``); None when no
    such process is visible here."""


@dataclass(frozen=True)
class NvmlReading(GpuReading):
    """One local GPU in one NVML read. ``host`` is None (this host); ``last_xid`` stays None
    (NVML delivers Xids as events: ``probes.nvml_events.XidEventWatcher``; the GPU's last
    Xid is kept by ``soak.watch.gpu.ledger.GpuState``, not by a reading);
    ``ecc_dbe_volatile`` is the volatile uncorrected ECC total;
    ``remapped_rows_uncorrectable``, ``row_remap_pending`` and ``row_remap_failure`` come
    from ``nvmlDeviceGetRemappedRows``."""

    pci_bus_id: str | None = None
    memory_reserved_mib: float | None = None
    """Memory the driver reserves (NVML memory info v2; None with the v1 fallback)."""
    remapped_rows_correctable: int | None = None
    retired_pages_pending: bool | None = None
    """Pages waiting to be retired (older boards; needs a reset to take effect)."""
    processes: tuple[GpuProcess, ...] | None = None
    """Compute processes; None when NVML cannot list them."""
    lost: bool = False
    """NVML says the GPU is lost (fell off the bus) or needs a reset; no values then."""
    lost_reason: str | None = None
    """NVML's words, e.g. "GPU is lost"."""
    not_supported: tuple[str, ...] = ()
    """Fields NVML does not support on this GPU or driver (their values are None)."""
    field_errors: dict[str, str] = field(default_factory=dict)
    """Fields NVML failed to read for another reason, with NVML's words."""


@dataclass
class NvmlDevice:
    """One GPU as found when NVML was opened."""

    index: int
    handle: Any
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: float | None = None
    lost: bool = False
    lost_reason: str | None = None
    memory_v1_only: bool = False
    """Memory info v2 failed once on this GPU; v1 is used from then on."""


class _FieldReader:
    """Calls one NVML function for one field, turning errors into None + a note."""

    def __init__(self) -> None:
        self.not_supported: list[str] = []
        self.errors: dict[str, str] = {}

    def get(self, name: str, fn: Callable[..., _T], *args: Any, **kw: Any) -> _T | None:
        try:
            return fn(*args, **kw)
        except _lost_errors() as e:
            raise _GpuLost(str(e)) from e
        except _not_supported_errors():
            self.not_supported.append(name)
        except pynvml.NVMLError as e:
            self.errors[name] = str(e)
        return None


class NvmlReader:
    """Opens NVML, lists the GPUs, reads them. Blocking calls: run them off the event loop.

    ``open()`` raises :class:`NvmlUnavailable`; ``read()`` never raises for a GPU's or a
    field's trouble (see the module docstring); ``close()`` shuts NVML down (idempotent).
    """

    def __init__(self, process_names: bool = True) -> None:
        self.process_names = process_names
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        """``"12.4"`` style (the highest CUDA version the driver supports)."""
        self.devices: list[NvmlDevice] = []
        self._open = False
        self._throttle_fn: str = "nvmlDeviceGetCurrentClocksEventReasons"

    @property
    def is_open(self) -> bool:
        return self._open

    def __enter__(self) -> NvmlReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -----------------------------------------------------------------------
    def open(self) -> None:
        """``nvmlInit``, driver and CUDA driver versions, and every GPU's identity."""
        if self._open:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            raise NvmlUnavailable(LIBRARY_NOT_FOUND) from e
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(f"NVML init failed: {e}") from e
        except OSError as e:  # a broken libnvidia-ml.so
            raise NvmlUnavailable(f"NVML library could not be loaded: {e}") from e
        self._open = True
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            self.close()
            raise NvmlUnavailable(f"NVML could not count the GPUs: {e}") from e
        if count <= 0:
            self.close()
            raise NvmlUnavailable("NVML sees no GPU on this host (device count 0)")
        f = _FieldReader()
        self.driver_version = _text(f.get("driver_version", pynvml.nvmlSystemGetDriverVersion))
        self.cuda_driver_version = self._cuda_version()
        self.devices = [self._device(i) for i in range(count)]

    def _cuda_version(self) -> str | None:
        f = _FieldReader()
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        except missing_function_errors():
            v = f.get("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion)
        except pynvml.NVMLError:
            return None
        if not isinstance(v, int) or v <= 0:
            return None
        return f"{v // 1000}.{(v % 1000) // 10}"

    def _device(self, index: int) -> NvmlDevice:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as e:
            # A GPU NVML counts but cannot open is as good as lost for telemetry.
            return NvmlDevice(index=index, handle=None, lost=True, lost_reason=str(e))
        dev = NvmlDevice(index=index, handle=handle)
        f = _FieldReader()
        try:
            dev.name = _text(f.get("name", pynvml.nvmlDeviceGetName, handle))
            dev.uuid = _text(f.get("uuid", pynvml.nvmlDeviceGetUUID, handle))
            dev.pci_bus_id = self._pci_bus_id(f, handle)
            mem = self._memory(dev, f)
            dev.memory_total_mib = mem[0]
        except _GpuLost as e:
            dev.lost, dev.lost_reason = True, str(e)
        return dev

    @staticmethod
    def _pci_bus_id(f: _FieldReader, handle: Any) -> str | None:
        try:
            info = pynvml.nvmlDeviceGetPciInfo_v3(handle)
        except _lost_errors() as e:
            raise _GpuLost(str(e)) from e
        except (*missing_function_errors(), pynvml.NVMLError):
            info = f.get("pci_bus_id", pynvml.nvmlDeviceGetPciInfo, handle)
        if info is None:
            return None
        return _text(getattr(info, "busId", None) or getattr(info, "busIdLegacy", None))

    # -- reading -----------------------------------------------------------------------
    def read(self) -> list[NvmlReading]:
        """One reading per GPU, in NVML index order."""
        if not self._open:
            raise RuntimeError("NvmlReader.read() before open()")
        return [self._read(dev) for dev in self.devices]

    def _lost_reading(self, dev: NvmlDevice) -> NvmlReading:
        return NvmlReading(
            host=None,
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            pci_bus_id=dev.pci_bus_id,
            lost=True,
            lost_reason=dev.lost_reason,
        )

    def _read(self, dev: NvmlDevice) -> NvmlReading:
        if dev.lost:
            return self._lost_reading(dev)
        h = dev.handle
        f = _FieldReader()
        try:
            total, used, free, reserved = self._memory(dev, f)
            util = f.get("util_percent", pynvml.nvmlDeviceGetUtilizationRates, h)
            temp = f.get(
                "temperature_c", pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU
            )
            power = f.get("power_w", pynvml.nvmlDeviceGetPowerUsage, h)
            limit = f.get("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            clock = f.get("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
            mask = self._throttle(f, h)
            ecc = f.get(
                "ecc_dbe_volatile",
                pynvml.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            )
            rows = f.get("remapped_rows", pynvml.nvmlDeviceGetRemappedRows, h)
            pending = f.get(
                "retired_pages_pending", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h
            )
            replays = f.get("pcie_replays", pynvml.nvmlDeviceGetPcieReplayCounter, h)
            procs = f.get("processes", pynvml.nvmlDeviceGetComputeRunningProcesses, h)
        except _GpuLost as e:
            dev.lost, dev.lost_reason = True, str(e)
            return self._lost_reading(dev)
        corr = unc = rpending = rfailure = None
        if rows is not None:
            corr, unc, rpending, rfailure = (int(x) for x in tuple(rows)[:4])
        return NvmlReading(
            host=None,
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            memory_used_mib=used,
            memory_free_mib=free,
            memory_total_mib=total,
            util_percent=float(util.gpu) if util is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            power_w=power / 1000 if power is not None else None,
            power_limit_w=limit / 1000 if limit is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            throttle_reasons=int(mask) if mask is not None else None,
            throttle=throttle_words(int(mask)) if mask is not None else None,
            ecc_dbe_volatile=int(ecc) if ecc is not None else None,
            row_remap_failure=bool(rfailure) if rfailure is not None else None,
            row_remap_pending=bool(rpending) if rpending is not None else None,
            remapped_rows_uncorrectable=unc,
            pcie_replays=int(replays) if replays is not None else None,
            pci_bus_id=dev.pci_bus_id,
            memory_reserved_mib=reserved,
            remapped_rows_correctable=corr,
            retired_pages_pending=bool(pending) if pending is not None else None,
            processes=self._processes(procs) if procs is not None else None,
            not_supported=tuple(f.not_supported),
            field_errors=dict(f.errors),
        )

    @staticmethod
    def _memory(
        dev: NvmlDevice, f: _FieldReader
    ) -> tuple[float | None, float | None, float | None, float | None]:
        """(total, used, free, reserved) in MiB: memory info v2, else v1 (no reserved)."""
        v2 = getattr(pynvml, "nvmlMemory_v2", None)
        if v2 is not None and not dev.memory_v1_only:
            try:
                m = pynvml.nvmlDeviceGetMemoryInfo(dev.handle, version=v2)
            except _lost_errors() as e:
                raise _GpuLost(str(e)) from e
            except (pynvml.NVMLError, TypeError):
                dev.memory_v1_only = True  # old driver or binding: don't ask again
            else:
                return (m.total / _MIB, m.used / _MIB, m.free / _MIB, m.reserved / _MIB)
        m1 = f.get("memory", pynvml.nvmlDeviceGetMemoryInfo, dev.handle)
        if m1 is None:
            return (None, None, None, None)
        return (m1.total / _MIB, m1.used / _MIB, m1.free / _MIB, None)

    def _throttle(self, f: _FieldReader, h: Any) -> int | None:
        """Clock-event reasons; the pre-12.x name (``...ThrottleReasons``) on old drivers."""
        if self._throttle_fn == "nvmlDeviceGetCurrentClocksEventReasons":
            try:
                return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
            except _lost_errors() as e:
                raise _GpuLost(str(e)) from e
            except missing_function_errors():
                self._throttle_fn = "nvmlDeviceGetCurrentClocksThrottleReasons"
            except pynvml.NVMLError_NotSupported:
                f.not_supported.append("throttle")
                return None
            except pynvml.NVMLError as e:
                f.errors["throttle"] = str(e)
                return None
        return f.get("throttle", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)

    def _processes(self, procs: Sequence[Any]) -> tuple[GpuProcess, ...]:
        out = []
        for p in procs:
            pid = int(p.pid)
            mem = getattr(p, "usedGpuMemory", None)
            out.append(
                GpuProcess(
                    pid=pid,
                    used_mib=mem / _MIB if isinstance(mem, int | float) else None,
                    name=_process_name(pid) if self.process_names else None,
                )
            )
        return tuple(out)

    # -- closing -----------------------------------------------------------------------
    def close(self) -> None:
        """``nvmlShutdown`` (errors ignored: there is nothing left to do about them)."""
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name() or None
    except (psutil.Error, OSError):
        return None
