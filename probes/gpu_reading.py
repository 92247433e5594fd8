"""One GPU's reading in one vocabulary, whichever source took it.

Both GPU sources map what they read onto :class:`GpuReading`: a dcgm-exporter scrape
(``probes.dcgm``) and a local NVML read (``probes.nvml``, whose ``NvmlReading`` adds what
only NVML can say). Field names, units and throttle words are shared, so the GPU ledger
(``soak.watch.gpu.ledger``) and every reader after it never ask which source it was.
Units: memory in MiB, power in W, clocks in MHz, temperature in °C. A field the source
does not give is ``None`` ("not supported"), never zero and never estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu idle"),
    (0x2, "applications clocks setting"),
    (0x4, "sw power cap"),
    (0x8, "hw slowdown"),
    (0x10, "sync boost"),
    (0x20, "sw thermal"),
    (0x40, "hw thermal"),
    (0x80, "hw power brake"),
    (0x100, "display clocks"),
)
"""NVML's clock-event (throttle) reason bits, as ``nvmlClocksEventReason*`` in
``pynvml`` 13.615: SyncBoost is 0x10, SwThermal 0x20, HwThermal 0x40, HwPowerBrake 0x80,
DisplayClockSetting 0x100. DCGM exports the same bitmask."""


def throttle_words(mask: int) -> tuple[str, ...]:
    """The reason bitmask as words; bits NVML does not define show as ``unknown 0x…``."""
    words = [word for bit, word in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    if rest := mask & ~known:
        words.append(f"unknown {rest:#x}")
    return tuple(words)


@dataclass(frozen=True)
class GpuReading:
    """One GPU in one read of its source. ``None``: the source does not give that field."""

    host: str | None
    """The exporter's ``Hostname`` label (None for a local NVML read: this host)."""
    index: int | None
    """The ``gpu`` label, or NVML's index (the node-local index)."""
    uuid: str | None
    name: str | None
    """``modelName``, e.g. "NVIDIA H200"."""
    memory_used_mib: float | None = None
    memory_free_mib: float | None = None
    memory_total_mib: float | None = None
    """``FB_TOTAL`` when exported, else used + free + reserved when all three are; never
    used + free alone (that leaves out the driver's reservation)."""
    util_percent: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    """The clock-event reasons bitmask as read."""
    throttle: tuple[str, ...] | None = None
    """The bitmask in words (``THROTTLE_BITS``); empty: no reason active."""
    last_xid: int | None = None
    """The last Xid the exporter saw (0: none since it started). Sticky, not a count."""
    xid_message: str | None = None
    """The exporter's own words for the last Xid (``err_msg`` label, newer exporters)."""
    ecc_dbe_volatile: int | None = None
    """Uncorrectable (double-bit) ECC errors since the driver loaded."""
    ecc_dbe_aggregate: int | None = None
    """Uncorrectable ECC errors over the board's life."""
    row_remap_failure: bool | None = None
    row_remap_pending: bool | None = None
    remapped_rows_uncorrectable: int | None = None
    pcie_replays: int | None = None
