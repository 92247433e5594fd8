"""The run's GPU sources together: local NVML and DCGM exporters, one list of GPUs.

Each source gives the same entry shapes (``view``/``summary``/``identity``); a source that
has no GPU to show (NVML without a driver) says so once in ``gpu_source_status`` rather
than as a fake GPU in the list.
"""

from __future__ import annotations

from typing import Literal

from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.gpu.nvml import NvmlWatch

GpuSource = DcgmWatch | NvmlWatch


def _is_gpu(entry: dict[str, object]) -> bool:
    """A per-GPU entry, not a whole-source status line."""
    return "index" in entry


def gpu_entries(
    sources: list[GpuSource], method: Literal["view", "summary"]
) -> list[dict[str, object]]:
    """Every source's per-GPU entries (snapshot ``view`` or record ``summary``)."""
    out: list[dict[str, object]] = []
    for src in sources:
        entries = src.view() if method == "view" else src.summary()
        out += [e for e in entries if _is_gpu(e)]
    return out


def gpu_source_status(sources: list[GpuSource]) -> list[dict[str, object]]:
    """One line per source: which ran, and why one showed no GPU."""
    out: list[dict[str, object]] = []
    for src in sources:
        if isinstance(src, NvmlWatch):
            line: dict[str, object] = {"source": "nvml", "status": src.status}
            if src.reason is not None:
                line["reason"] = src.reason
        else:
            line = {"source": "dcgm", "exporters": len(src.urls)}
        line["gpus"] = sum(1 for e in src.summary() if _is_gpu(e))
        out.append(line)
    return out
