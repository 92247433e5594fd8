"""Pane 6: one compact row per GPU, or a summary plus the GPUs that need a look; in a
soak, the GPU memory's leak rate per hour above them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.content import Content

from soak.record.gpu_telemetry import GpuView
from soak.record.telemetry import CoverageBySource
from tui.coverage import answered, coverage, lost_entries, why
from tui.fmt import pct
from tui.glyphs import Glyphs
from tui.panes.base import Pane, fit, line, lines, muted
from tui.panes.endurance import leak_line
from tui.reader import EventEntry
from tui.runview import RunView

GpuKey = tuple[int | None, int | None, str | None]
"""Which GPU: exporter (``url_index``, DCGM), index, and the source when it is no
exporter (``nvml``)."""


def gpu_key(url_index: int | None, index: int | None, source: str | None) -> GpuKey:
    """The same key for a GPU's snapshot entry and for its fault events' data."""
    return (url_index, index, None if url_index is not None else source)


def ecc_errors(events: Iterable[EventEntry]) -> dict[GpuKey, int]:
    """New uncorrectable ECC errors per GPU so far, from the GPU ledger's ``fault`` events
    (``ecc_uncorrectable``: ``ecc_new`` of them, or one from an NVML double-bit event). The
    snapshot's GPU entries carry no ECC count: a change of the count is a fault event."""
    out: dict[GpuKey, int] = {}
    for e in events:
        f = e.facts
        if e.event.kind == "fault" and f.fault == "ecc_uncorrectable":
            key = gpu_key(f.url_index, f.gpu, f.source)
            out[key] = out.get(key, 0) + (f.ecc_new if f.ecc_new is not None else 1)
    return out


def gpu_label(gpu: GpuView, multi_source: bool) -> str:
    """``1:3`` (exporter 1, GPU 3) when several sources report, else ``3``."""
    i = "?" if gpu.index is None else str(gpu.index)
    return f"{gpu.url_index}:{i}" if multi_source and gpu.url_index is not None else i


def memory_fraction(gpu: GpuView) -> float | None:
    """Used / total (total from used + free when the source gives no total)."""
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    if total is None and used is not None and gpu.memory_free_mib is not None:
        total = used + gpu.memory_free_mib
    if used is None or not total:
        return None
    return used / total


def badges(gpu: GpuView, ecc: int = 0, compact: bool = False) -> list[tuple[str, str]]:
    """Fault badges: Xid, ECC (``ecc``: new uncorrectable errors, :func:`ecc_errors`),
    throttling, other faults — words with colour."""
    pad = "" if compact else " "
    out = []
    if gpu.last_xid:
        out.append((f"{pad}XID {gpu.last_xid}{pad}", "bold reverse $text-error"))
    if ecc:
        out.append((f"{pad}ECC {ecc}{pad}", "bold reverse $text-error"))
    if gpu.faults and not gpu.last_xid and not ecc:  # faults the badges before do not say
        out.append((f"{pad}FAULT {gpu.faults}{pad}", "bold reverse $text-error"))
    if gpu.throttle:  # the active throttle reasons in words
        out.append(("THR" if compact else " THROTTLE ", "bold $text-warning"))
    return out


def _flagged(gpu: GpuView, ecc: int) -> bool:
    return bool(badges(gpu, ecc)) or (gpu.status or "ok") != "ok"


def _ecc_of(gpu: GpuView, ecc: dict[GpuKey, int]) -> int:
    return ecc.get(gpu_key(gpu.url_index, gpu.index, gpu.source), 0)


HEADING = "GPU  mem"


def heading(bar_w: int) -> Content:
    """Column names above the rows."""
    return line(muted(f"{HEADING:<{4 + bar_w + 5}} util  temp power"))


def bar_width(width: int) -> int:
    """Memory bar cells: what is left of the row after the numbers (3 to 24)."""
    return max(3, min(24, width - 33))


def gpu_row(gpu: GpuView, label: str, width: int, g: Glyphs, ecc: int = 0) -> Content:
    """``1:1 ██░░ 16%   6%  32°C  131W XID 31`` (memory bar, util, temp, power, badges)."""
    compact = width < 60
    status = gpu.status or "ok"
    if status != "ok":
        style = "$text-error" if "fail" in status else "dim"
        return line((f"{label:<4}", "bold"), (status, style), " ", *badges(gpu, ecc, compact))
    frac = memory_fraction(gpu)
    temp, power, util = gpu.temperature_c, gpu.power_w, gpu.util_percent
    parts: list[Any] = [
        (f"{label:<4}", "bold"),
        (g.bar(frac, bar_width(width)), "$text-primary"),
        f" {pct(frac, g):>4}",
        f" {g.missing if util is None else f'{util:.0f}%':>4}",
        f" {g.missing if temp is None else f'{temp:.0f}{g.degree}C':>5}",
        f" {g.missing if power is None else f'{power:.0f}W':>5} ",
    ]
    if width >= 70:
        parts.append(muted(f"{gpu.host or ''} {gpu.name or ''} "))
    return line(*parts, *badges(gpu, ecc, compact))


def gpu_summary(gpus: list[GpuView], ecc: dict[GpuKey, int], g: Glyphs) -> list[Content]:
    """Two lines for many GPUs: memory, utilisation, temperature, power, faults."""
    fracs = [f for f in (memory_fraction(x) for x in gpus) if f is not None]
    utils = [x.util_percent for x in gpus if x.util_percent is not None]
    temps = [x.temperature_c for x in gpus if x.temperature_c is not None]
    powers = [x.power_w for x in gpus if x.power_w is not None]
    hosts = {x.host for x in gpus if x.host}
    bad = sum(1 for x in gpus if _flagged(x, _ecc_of(x, ecc)))
    where = f", {len(hosts)} hosts" if len(hosts) > 1 else ""
    first = line(
        (f"{len(gpus)} GPUs{where}", "bold"),
        " ",
        (f"{bad} need a look", "bold $text-error") if bad else ("all ok", "$text-success"),
    )
    second = line(
        muted("max mem "),
        pct(max(fracs), g) if fracs else g.missing,
        muted(" util "),
        f"{max(utils):.0f}%" if utils else g.missing,
        " ",
        f"{max(temps):.0f}{g.degree}C" if temps else g.missing,
        muted(" sum "),
        f"{sum(powers):.0f}W" if powers else g.missing,
    )
    return [first, second]


GPU_SOURCES = (("dcgm", "DCGM"), ("nvml", "NVML"))
"""The coverage sources of GPU telemetry, with their names on screen."""


def lost_sources(cov: CoverageBySource, width: int, g: Glyphs) -> list[Content]:
    """``DCGM exporter 0 LOST: 0/16 (HTTP 404)`` (answered of expected samples, the main
    failure): one line per GPU source that answered under half its samples during the
    load (its GPUs' rows, if any, are stale)."""
    out = []
    for source, word in GPU_SOURCES:
        for key, entry in lost_entries(cov, source):
            out.append(
                fit(
                    line(
                        (f"{word} {key} LOST", "bold $text-error"),
                        f": {answered(entry)} ",
                        muted(f"({why(entry)})"),
                    ),
                    width,
                    g,
                )
            )
    return out


class GpuPane(Pane):
    """GPU telemetry as the runner's sources (NVML, DCGM) report it; never invented."""

    NUMBER = 6
    TITLE = "GPUs"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        lost = lost_sources(coverage(view), width, g)[:height]
        leak = leak_line(view, (("gpu_mem", "GPU mem"),), width) if view.telemetry.gpus else None
        top = [*lost, *([leak] if leak is not None else [])][:height]
        rest = self._gpus(view, width, height - len(top)) if height > len(top) else []
        if lost and not view.telemetry.gpus:
            rest = []  # not "no GPU source": there is one, and it is lost
        return lines([*top, *rest])

    def _gpus(self, view: RunView, width: int, height: int) -> list[Content]:
        g = view.glyphs
        gpus = view.telemetry.gpus
        if not gpus:
            return [line(muted("no GPU source"))]
        ecc = ecc_errors(view.events)
        multi = len({x.url_index for x in gpus}) > 1
        if len(gpus) < height:
            rows = [gpu_row(x, gpu_label(x, multi), width, g, _ecc_of(x, ecc)) for x in gpus]
            return [heading(bar_width(width)), *rows]
        out = gpu_summary(gpus, ecc, g)
        if height > len(out) + 1:
            out.append(heading(bar_width(width)))
        # The GPUs that need a look first, then the others while there is room.
        ranked = sorted(gpus, key=lambda x: not _flagged(x, _ecc_of(x, ecc)))
        room = height - len(out)
        for x in ranked[: max(0, room)]:
            out.append(gpu_row(x, gpu_label(x, multi), width, g, _ecc_of(x, ecc)))
        if len(ranked) > room > 0:
            out[-1] = line(muted(f"+{len(ranked) - room + 1} more GPUs (6 to maximise)"))
        return out[:height]
