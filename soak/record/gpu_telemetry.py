"""The GPU entries of the snapshot, the record and its identity, as every GPU source
writes them (``soak.watch.gpu``: NVML on this host, DCGM exporters; their shared ledger).

An entry names its GPU the way its source does: ``url_index`` (which ``--dcgm`` exporter)
for DCGM, ``source: "nvml"`` for NVML; then ``index``, ``name``, ``host``. A value the
source does not give is None; see :mod:`soak.record.shape` for which keys are written when.
"""

from __future__ import annotations

from pydantic import Field

from soak.record.shape import Section

_NAMED_BY = frozenset({"url_index", "source"})


class GpuProcess(Section):
    """One compute process on a local GPU (NVML)."""

    pid: int | None = None
    used_mib: float | None = None
    name: str | None = None


class GpuView(Section):
    """``telemetry.gpus[i]`` of a snapshot: a GPU's latest reading.

    ``status``: ``ok`` (with the values), ``no data yet``, ``missing`` (DCGM: out of its
    exporter's output), ``lost`` (NVML, with ``reason``), ``scrape failed`` / ``read
    failed`` / ``read stalled`` (with ``error``; no values, nothing stale)."""

    absent_unless_set = _NAMED_BY | frozenset(
        {
            "error",
            "reason",
            "t",
            "memory_free_mib",
            "memory_used_mib",
            "memory_total_mib",
            "util_percent",
            "temperature_c",
            "power_w",
            "power_limit_w",
            "sm_clock_mhz",
            "throttle",
            "last_xid",
            "faults",
            "memory_reserved_mib",
            "processes",
        }
    )

    url_index: int | None = None
    source: str | None = None
    index: int | None = None
    name: str | None = None
    host: str | None = None
    status: str | None = None
    error: str | None = None
    reason: str | None = None
    t: float | None = None
    """Seconds since the run's origin of the reading."""
    memory_free_mib: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    util_percent: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: list[str] | None = None
    """The active throttle reasons in words; None: not exported."""
    last_xid: int | None = None
    """The GPU's last Xid (DCGM's sticky gauge, 0: none; NVML's last Xid event)."""
    faults: int | None = None
    memory_reserved_mib: float | None = None
    processes: list[GpuProcess] | None = None


class XidEvent(Section):
    """One Xid a GPU reported (or had already set at its first reading)."""

    t_s: float | None = None
    xid: int | None = None
    meaning: str | None = None
    already_set: bool = False


class GpuSummary(Section):
    """``telemetry.gpus[i]`` of the record: one GPU over the run (NVML adds ``status``,
    ``pci_bus_id`` and ``not_supported``)."""

    absent_unless_set = _NAMED_BY | frozenset({"status", "pci_bus_id", "not_supported"})

    url_index: int | None = None
    source: str | None = None
    index: int | None = None
    name: str | None = None
    host: str | None = None
    uuid: str | None = None
    min_free_mib: float | None = None
    max_used_mib: float | None = None
    max_temp_c: float | None = None
    max_power_w: float | None = None
    last_xid: int | None = None
    xid_events: list[XidEvent] = Field(default_factory=list)
    xid_events_dropped: int = 0
    ecc_new: int | None = None
    """New uncorrectable ECC errors during the run (None: never read)."""
    remapped_rows_new: int | None = None
    remap_failed: bool | None = None
    throttle_seen: list[str] = Field(default_factory=list)
    throttle_s: dict[str, float] = Field(default_factory=dict)
    """Seconds under each throttle reason."""
    samples: int = 0
    scrape_errors: int = 0
    status: str | None = None
    pci_bus_id: str | None = None
    not_supported: list[str] = Field(default_factory=list)


class GpuSourceStatus(Section):
    """``telemetry.gpu_sources[i]``: one GPU source, which ran and how many GPUs it gave
    (NVML: ``status`` and the ``reason`` it showed none; DCGM: its ``exporters``)."""

    absent_unless_set = frozenset({"status", "reason", "exporters"})

    source: str | None = None
    status: str | None = None
    reason: str | None = None
    exporters: int | None = None
    gpus: int = 0


class GpuIdentity(Section):
    """``identity.gpus[i]``: which GPU (NVML adds PCI bus, memory and driver versions)."""

    absent_unless_set = frozenset(
        {"url_index", "pci_bus_id", "memory_total_mib", "driver_version", "cuda_driver_version"}
    )

    url_index: int | None = None
    index: int | None = None
    name: str | None = None
    host: str | None = None
    uuid: str | None = None
    source: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: float | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
