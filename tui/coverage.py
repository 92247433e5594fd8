"""Telemetry coverage as the monitor shows it: which sources were lost, and why.

The runner writes ``telemetry.coverage.<source>.<key>`` into every snapshot (and the
record) — ``{answered, expected, share, lost, why, failures}`` per engine ``/metrics``
and ``/health`` (``endpoint i``), server log, DCGM exporter (``exporter i``), NVML
(``local GPUs``) and the host sampler — and, while running, one ``telemetry_lost`` (or
``telemetry_missing``) reason per source lost so far (see ``soak.judge.coverage``). A source
nobody configured has no entry; a healthy one is not drawn: panes show only what was lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tui.fmt import mapping, num, text
from tui.runview import RunView

LOSS_CODES = frozenset({"telemetry_lost", "telemetry_missing"})
"""Reason codes the runner gives a lost (or required and absent) telemetry source."""


_LOST_MESSAGE = re.compile(r"^(?P<source>.+?) of (?P<key>.+?) answered ")
"""``engine /metrics of endpoint 0 answered 0 of 16 ...`` (``soak.judge.coverage``'s words)."""


@dataclass(frozen=True)
class LostSource:
    """One lost source in a few words, and whether it fails the run."""

    label: str
    """``engine /metrics e0``, ``DCGM exporter 0``, ``GPU telemetry``."""
    failed: bool
    """Its reason's effect is ``failed`` (``--require-telemetry``), not a note."""


def short_key(key: str) -> str:
    """``endpoint 3`` → ``e3`` (pane 4's name for a replica); other keys unchanged."""
    m = re.fullmatch(r"endpoint (\d+)", key)
    return f"e{m.group(1)}" if m else key


def lost_so_far(view: RunView) -> list[LostSource]:
    """The snapshot's telemetry reasons, compactly: what the header appends while running."""
    out: list[LostSource] = []
    for r in view.reasons:
        code = text(r, "code")
        if code not in LOSS_CODES:
            continue
        message = text(r, "message") or ""
        if code == "telemetry_missing":
            label = "GPU telemetry"
        elif m := _LOST_MESSAGE.match(message):
            source, key = m["source"], m["key"]
            # "host sampling of host": the key says nothing the source did not.
            label = source if key in source.split() else f"{source} {short_key(key)}"
        else:  # words this version does not know: the start of them
            label = message[:32] or "telemetry"
        out.append(LostSource(label, text(r, "effect") == "failed"))
    return out


def coverage(view: RunView) -> Mapping[str, Any]:
    """``telemetry.coverage`` of the snapshot shown (the record's when it has none)."""
    found = mapping(view.telemetry, "coverage")
    if not found and view.cursor is None and view.record is not None:
        found = mapping(view.record, "telemetry", "coverage")
    return found


def lost_entry(cov: Mapping[str, Any], source: str, key: str) -> Mapping[str, Any] | None:
    """The coverage entry of ``source``/``key`` when it says lost, else None."""
    entry = mapping(cov, source, key)
    return entry if entry.get("lost") is True else None


def lost_entries(cov: Mapping[str, Any], source: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Every lost key of ``source``, in the runner's order."""
    return [
        (key, e)
        for key, e in mapping(cov, source).items()
        if isinstance(e, Mapping) and e.get("lost") is True
    ]


def why(entry: Mapping[str, Any]) -> str:
    """The entry's most common failure (``HTTP 404``), or that nothing answered."""
    return text(entry, "why") or "no sample taken"


def answered(entry: Mapping[str, Any]) -> str:
    """``0/16`` (answered of expected samples; ``?`` for a number that is missing)."""
    a, e = num(entry, "answered"), num(entry, "expected")
    return f"{'?' if a is None else int(a)}/{'?' if e is None else int(e)}"
