"""Simulated GPUs of one replica, exposed like NVIDIA's dcgm-exporter.

Each replica plays one node with ``gpus_per_replica`` GPUs (``gpu`` labels 0..N-1,
``Hostname`` ``<hostname>-<replica>``). Values follow the engine: utilisation tracks
running/max_num_seqs, framebuffer use tracks weights plus KV usage (plus what slow-leak
holds), and power and temperature approach their load targets with first-order lag, so
graphs move like a real board's. ``DCGM_FI_DEV_XID_ERRORS`` holds the last Xid (0 until
one happens), as the exporter does. The model name says "(simulated)" so no one mistakes
it for hardware.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

MODEL_NAME = "NVIDIA H200 (simulated)"
FB_TOTAL_MIB = 143771
FB_BASE_MIB = 21500  # weights + activations + CUDA context per GPU
FB_KV_MIB = 104000  # the KV pool share of one GPU
IDLE_W, MAX_W = 95.0, 690.0
IDLE_C, MAX_C = 31.0, 71.0
IDLE_MHZ, MAX_MHZ = 345.0, 1980.0
POWER_TAU_S, TEMP_TAU_S = 3.0, 25.0
#: PCI bus numbers of an 8-GPU HGX board, as they show up in Xid kernel lines.
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

_FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
)
_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


def fake_uuid(replica: int, gpu: int) -> str:
    """A stable GPU UUID for a simulated board."""
    h = hashlib.sha1(f"simengine/{replica}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def pci_bus(replica: int, gpu: int) -> str:
    """``0000:bb:00`` as in an ``NVRM: Xid (PCI:...)`` line."""
    return f"0000:{PCI_BUSES[gpu % len(PCI_BUSES)] + replica // len(PCI_BUSES):02x}:00"


class SimGpu:
    """One board: lagged power/temperature and the last Xid."""

    def __init__(self, replica: int, index: int, hostname: str) -> None:
        self.index = index
        self.uuid = fake_uuid(replica, index)
        self.pci = pci_bus(replica, index)
        self.hostname = hostname
        self.power = IDLE_W
        self.temp = IDLE_C
        self.last_xid = 0
        self._t = time.monotonic()

    def sample(
        self, util: float, kv_usage: float, alive: bool, extra_mib: float = 0.0
    ) -> dict[str, float]:
        """Values now for a given load (util 0..1, KV usage 0..1, memory held beyond the
        weights and the KV blocks in MiB)."""
        now = time.monotonic()
        dt = max(now - self._t, 0.0)
        self._t = now
        # A slight per-board skew keeps the four lines of a graph apart.
        skew = 1.0 + 0.03 * ((self.index % 4) - 1.5) / 1.5
        u = min(max(util * skew, 0.0), 1.0)
        target_w = IDLE_W + (MAX_W - IDLE_W) * u
        target_c = IDLE_C + (MAX_C - IDLE_C) * u
        self.power += (target_w - self.power) * (1 - math.exp(-dt / POWER_TAU_S))
        self.temp += (target_c - self.temp) * (1 - math.exp(-dt / TEMP_TAU_S))
        used = (FB_BASE_MIB + FB_KV_MIB * kv_usage + extra_mib) if alive else 512.0
        used = min(used, FB_TOTAL_MIB - 256.0)  # a board never reports more than it has
        return {
            "DCGM_FI_DEV_SM_CLOCK": MAX_MHZ if u > 0.01 else IDLE_MHZ,
            "DCGM_FI_DEV_GPU_TEMP": round(self.temp),
            "DCGM_FI_DEV_POWER_USAGE": round(self.power, 3),
            "DCGM_FI_DEV_GPU_UTIL": round(u * 100),
            "DCGM_FI_DEV_XID_ERRORS": float(self.last_xid),
            "DCGM_FI_DEV_FB_FREE": float(FB_TOTAL_MIB - round(used)),
            "DCGM_FI_DEV_FB_USED": float(round(used)),
        }


#: Returns (utilisation 0..1, KV usage 0..1, engine alive).
LoadProbe = Callable[[], tuple[float, float, bool]]
#: Returns the memory each board holds beyond weights and KV blocks (MiB): slow-leak's.
ExtraMemory = Callable[[], float]


class DcgmExporter(Collector):
    """The GPUs of one replica as a Prometheus collector and registry."""

    def __init__(
        self,
        replica: int,
        n_gpus: int,
        hostname: str,
        load: LoadProbe,
        extra_mib: ExtraMemory | None = None,
    ) -> None:
        self.hostname = f"{hostname}-{replica}"
        self.gpus = [SimGpu(replica, i, self.hostname) for i in range(n_gpus)]
        self._load = load
        self._extra_mib = extra_mib
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def gpu(self, index: int) -> SimGpu:
        """A GPU by replica-local index (clamped to the last one)."""
        return self.gpus[min(max(index, 0), len(self.gpus) - 1)]

    def collect(self) -> Iterator[Metric]:
        """Yield one gauge family per DCGM field, one sample per GPU."""
        util, kv, alive = self._load()
        extra = self._extra_mib() if self._extra_mib is not None else 0.0
        samples = [(g, g.sample(util, kv, alive, extra)) for g in self.gpus]
        for name, doc in _FIELDS:
            fam = GaugeMetricFamily(name, doc, labels=list(_LABELS))
            for g, vals in samples:
                labels = [str(g.index), g.uuid, f"0000{g.pci}.0", f"nvidia{g.index}"]
                fam.add_metric([*labels, MODEL_NAME, g.hostname], vals[name])
            yield fam

    def render(self) -> bytes:
        """The exporter's Prometheus text."""
        return generate_latest(self.registry)
