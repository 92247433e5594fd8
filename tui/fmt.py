"""Turning the models' numbers and words into short labels for the panes.

A value the snapshot does not have is ``None`` and shows as the glyph set's missing mark
("no data", never 0).
"""

from __future__ import annotations

from soak.safe_text import safe_line
from tui.glyphs import Glyphs


def mmss(seconds: float | None) -> str:
    """``mm:ss`` (``h:mm:ss`` past an hour)."""
    if seconds is None:
        return "--:--"
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60:02d}:{s % 60:02d}"


def secs(v: float | None, g: Glyphs) -> str:
    """A latency in seconds as ``46ms``, ``2.12s`` or ``95s`` (at most 5 characters)."""
    if v is None:
        return g.missing
    if v < 0.0995:
        return f"{v * 1000:.1f}ms" if v < 0.00995 else f"{v * 1000:.0f}ms"
    if v < 0.9995:
        return f"{v * 1000:.0f}ms"
    if v < 9.995:
        return f"{v:.2f}s"
    if v < 99.95:
        return f"{v:.1f}s"
    return f"{v:.0f}s"


def rate(v: float | None, g: Glyphs) -> str:
    """A rate: ``1447``, ``17.3``, ``0.52``, ``12.4k``."""
    if v is None:
        return g.missing
    if v >= 99_950:
        return f"{v / 1000:.0f}k"
    if v >= 9_999.5:
        return f"{v / 1000:.1f}k"
    if v >= 99.95:
        return f"{v:.0f}"
    if v >= 9.995:
        return f"{v:.1f}"
    return f"{v:.2f}"


def count(v: float | None, g: Glyphs) -> str:
    """A whole count, or the missing mark."""
    return g.missing if v is None else f"{int(v)}"


def pct(fraction: float | None, g: Glyphs) -> str:
    """A 0–1 fraction as a whole percentage."""
    return g.missing if fraction is None else f"{fraction * 100:.0f}%"


def change(fraction: float | None, g: Glyphs) -> str:
    """A change since the baseline: ``▼31%``, ``▲420%``, ``▲43×`` past +999 % (ASCII
    ``-31%``, ``+420%``, ``+43x``); at most 5 characters."""
    if fraction is None:
        return g.missing
    size = abs(fraction) * 100
    if size < 0.05:
        return "0%"
    arrow = g.rise if fraction > 0 else g.fall
    if size < 9.95:
        return f"{arrow}{size:.1f}%"
    if size < 999.5:
        return f"{arrow}{size:.0f}%"
    return f"{arrow}{1 + fraction:.0f}{g.times}"


def signed(v: float | None, g: Glyphs) -> str:
    """A rate of change with its sign: ``+120``, ``-0.5``, ``+1.2k``."""
    if v is None:
        return g.missing
    sign, size = ("-" if v < 0 else "+"), abs(v)
    if size < 9.95:
        return f"{sign}{size:.1f}"
    if size < 999.5:
        return f"{sign}{size:.0f}"
    if size < 99_950:
        return f"{sign}{size / 1000:.1f}k"
    return f"{sign}{size / 1000:.0f}k"


def clip(s: str, width: int, g: Glyphs) -> str:
    """``s`` made display-safe (escapes shown as ``\\x1b``: it is often a server's words)
    and cut to ``width`` cells with an ellipsis when it does not fit."""
    s = safe_line(s)
    if width <= 0:
        return ""
    if len(s) <= width:
        return s
    if width <= len(g.ellipsis):
        return s[:width]
    return s[: width - len(g.ellipsis)] + g.ellipsis


PHASE_LABELS = {
    "identity": "identity",
    "before_gates": "before gates",
    "barrier": "barrier",
    "load": "load",
    "paused": "load paused",
    "drain": "drain",
    "after_gates": "after gates",
    "finalize": "finalize",
    "done": "done",
}


def phase_label(phase: str | None) -> str:
    """The operator's word for a protocol phase (unknown ones pass through)."""
    if not phase:
        return "waiting for the runner"
    return PHASE_LABELS.get(phase, phase.replace("_", " "))


STATUS_STYLES = {
    "PASSED": "bold $text-success",
    "FAILED": "bold $text-error",
    "INVALID": "bold $text-warning",
    "ABORTED": "bold $text-warning",
}


def status_style(status: str | None) -> str:
    """Colour for a verdict word (the word itself is always shown)."""
    return STATUS_STYLES.get(status or "", "bold $text-primary")


ENDURANCE_STYLES = {
    "ok": "",
    "close": "bold $text-warning",
    "breached": "bold reverse $text-error",
    "no_data": "dim",
}
"""A drift or leak figure by its state against the policy's bound (``close``: past half
of it). Reverse video keeps a breach visible without colour (``NO_COLOR``)."""

BADGE_STYLES = {
    "ok": "$text-success",
    "close": "bold $text-warning",
    "breached": "bold reverse $text-error",
    "not_judged": "dim",
}
"""The header's endurance badge by the view's ``badge``."""


SEVERITY_STYLES = {
    "critical": "bold $text-error",
    "error": "$text-error",
    "warning": "$text-warning",
    "info": "",
}
