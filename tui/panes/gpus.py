"""Pane 6: one compact row per GPU, or a summary plus the GPUs that need a look."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.content import Content

from tui.coverage import answered, coverage, lost_entries, why
from tui.fmt import dicts, num, pct, text
from tui.glyphs import Glyphs
from tui.panes.base import Pane, fit, line, lines, muted
from tui.runview import RunView


def gpu_label(gpu: Mapping[str, Any], multi_source: bool) -> str:
    """``1:3`` (exporter 1, GPU 3) when several sources report, else ``3``."""
    idx = num(gpu, "index")
    src = num(gpu, "url_index")
    i = "?" if idx is None else str(int(idx))
    return f"{int(src)}:{i}" if multi_source and src is not None else i


def memory_fraction(gpu: Mapping[str, Any]) -> float | None:
    """Used / total (total from used + free when the source gives no total)."""
    used = num(gpu, "memory_used_mib")
    total = num(gpu, "memory_total_mib")
    if total is None and used is not None and num(gpu, "memory_free_mib") is not None:
        total = used + (num(gpu, "memory_free_mib") or 0.0)
    if used is None or not total:
        return None
    return used / total


def badges(gpu: Mapping[str, Any], compact: bool = False) -> list[tuple[str, str]]:
    """Fault badges: Xid, ECC, throttling, other faults — words with colour."""
    pad = "" if compact else " "
    out = []
    xid = num(gpu, "last_xid")
    if xid:
        out.append((f"{pad}XID {int(xid)}{pad}", "bold reverse $text-error"))
    ecc = sum(
        v
        for k, v in gpu.items()
        if "ecc" in k.lower() and isinstance(v, int | float) and not isinstance(v, bool)
    )
    if ecc:
        out.append((f"{pad}ECC {int(ecc)}{pad}", "bold reverse $text-error"))
    faults = num(gpu, "faults")
    if faults and not xid:
        out.append((f"{pad}FAULT {int(faults)}{pad}", "bold reverse $text-error"))
    throttle = gpu.get("throttle")
    if throttle not in (None, 0, "", "none", [], {}):
        out.append(("THR" if compact else " THROTTLE ", "bold $text-warning"))
    return out


def _flagged(gpu: Mapping[str, Any]) -> bool:
    return bool(badges(gpu)) or (text(gpu, "status") or "ok") != "ok"


HEADING = "GPU  mem"


def heading(bar_w: int) -> Content:
    """Column names above the rows."""
    return line(muted(f"{HEADING:<{4 + bar_w + 5}} util  temp power"))


def bar_width(width: int) -> int:
    """Memory bar cells: what is left of the row after the numbers (3 to 24)."""
    return max(3, min(24, width - 33))


def gpu_row(gpu: Mapping[str, Any], label: str, width: int, g: Glyphs) -> Content:
    """``1:1 ██░░ 16%   6%  32°C  131W XID 31`` (memory bar, util, temp, power, badges)."""
    compact = width < 60
    status = text(gpu, "status") or "ok"
    if status != "ok":
        style = "$text-error" if "fail" in status else "dim"
        return line((f"{label:<4}", "bold"), (status, style), " ", *badges(gpu, compact))
    frac = memory_fraction(gpu)
    temp = num(gpu, "temperature_c")
    power = num(gpu, "power_w")
    util = num(gpu, "util_percent")
    parts: list[Any] = [
        (f"{label:<4}", "bold"),
        (g.bar(frac, bar_width(width)), "$text-primary"),
        f" {pct(frac, g):>4}",
        f" {g.missing if util is None else f'{util:.0f}%':>4}",
        f" {g.missing if temp is None else f'{temp:.0f}{g.degree}C':>5}",
        f" {g.missing if power is None else f'{power:.0f}W':>5} ",
    ]
    if width >= 70:
        name = text(gpu, "name") or ""
        host = text(gpu, "host") or ""
        parts.append(muted(f"{host} {name} "))
    return line(*parts, *badges(gpu, compact))


def gpu_summary(gpus: list[Mapping[str, Any]], g: Glyphs) -> list[Content]:
    """Two lines for many GPUs: memory, utilisation, temperature, power, faults."""
    fracs = [f for f in (memory_fraction(x) for x in gpus) if f is not None]
    utils = [u for u in (num(x, "util_percent") for x in gpus) if u is not None]
    temps = [t for t in (num(x, "temperature_c") for x in gpus) if t is not None]
    powers = [p for p in (num(x, "power_w") for x in gpus) if p is not None]
    hosts = {text(x, "host") for x in gpus if text(x, "host")}
    bad = sum(1 for x in gpus if _flagged(x))
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


def lost_sources(cov: Mapping[str, Any], width: int, g: Glyphs) -> list[Content]:
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
        rest = self._gpus(view, width, height - len(lost)) if height > len(lost) else []
        if lost and not dicts(view.telemetry, "gpus"):
            rest = []  # not "no GPU source": there is one, and it is lost
        return lines([*lost, *rest])

    def _gpus(self, view: RunView, width: int, height: int) -> list[Content]:
        g = view.glyphs
        gpus = dicts(view.telemetry, "gpus")
        if not gpus:
            return [line(muted("no GPU source"))]
        multi = len({num(x, "url_index") for x in gpus}) > 1
        if len(gpus) < height:
            rows = [gpu_row(x, gpu_label(x, multi), width, g) for x in gpus]
            return [heading(bar_width(width)), *rows]
        out = gpu_summary(gpus, g)
        if height > len(out) + 1:
            out.append(heading(bar_width(width)))
        # The GPUs that need a look first, then the others while there is room.
        ranked = sorted(gpus, key=lambda x: not _flagged(x))
        room = height - len(out)
        for x in ranked[: max(0, room)]:
            out.append(gpu_row(x, gpu_label(x, multi), width, g))
        if len(ranked) > room > 0:
            out[-1] = line(muted(f"+{len(ranked) - room + 1} more GPUs (6 to maximise)"))
        return out[:height]
