"""Telemetry coverage as the monitor shows it: which sources were lost, and why.

The runner writes ``telemetry.coverage.<source>.<key>`` into every snapshot (and the
record) — a :class:`~soak.record.telemetry.CoverageEntry` (answered, expected, share,
lost, why, failures) per engine ``/metrics`` and ``/health`` (``endpoint i``), server log,
DCGM exporter (``exporter i``), NVML (``local GPUs``) and the host sampler — and, while
running, one ``telemetry_lost`` reason per source lost so far, or a
``telemetry_missing`` one for a required GPU kind with no GPU source (see
``soak.judge.coverage``). A source nobody configured has no entry; a healthy one is not
drawn: panes show only what was lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from soak.judge.coverage import REQUIRE_KINDS, SOURCE_WORDS
from soak.record.telemetry import CoverageBySource, CoverageEntry
from tui.runview import RunView


@dataclass(frozen=True)
class LostSource:
    """One lost source in a few words, and whether it fails the run."""

    label: str
    """``engine /metrics e0``, ``DCGM exporter 0``, ``GPU telemetry``."""
    failed: bool
    """Its kind is required (``--require-telemetry``): its loss fails the run, not a note."""


def short_key(key: str) -> str:
    """``endpoint 3`` → ``e3`` (pane 4's name for a replica); other keys unchanged."""
    m = re.fullmatch(r"endpoint (\d+)", key)
    return f"e{m.group(1)}" if m else key


def _kind(source: str) -> str:
    """The ``--require-telemetry`` kind a coverage source stands for."""
    return next((kind for kind, sources in REQUIRE_KINDS.items() if source in sources), source)


def lost_so_far(view: RunView) -> list[LostSource]:
    """The sources lost so far, compactly: what the header appends while running. Read
    from the snapshot's coverage (the entries that say ``lost``, in the runner's order, as
    its ``telemetry_lost`` reasons are), then the required GPU kind with no GPU source."""
    required = view.meta.required_telemetry if view.meta else ()
    out: list[LostSource] = []
    for source, keys in coverage(view).items():
        word = SOURCE_WORDS.get(source, source)
        for key, entry in keys.items():
            if entry.lost:
                # "host sampling of host": the key says nothing the source did not.
                label = word if key in word.split() else f"{word} {short_key(key)}"
                out.append(LostSource(label, _kind(source) in required))
    out += [
        LostSource("GPU telemetry", r.effect == "failed")
        for r in view.reasons
        if r.code == "telemetry_missing"
    ]
    return out


def coverage(view: RunView) -> CoverageBySource:
    """``telemetry.coverage`` of the snapshot shown (the record's when it has none)."""
    found = view.telemetry.coverage
    if not found and view.cursor is None and view.record is not None:
        found = view.record.telemetry.coverage
    return found


def lost_entry(cov: CoverageBySource, source: str, key: str) -> CoverageEntry | None:
    """The coverage entry of ``source``/``key`` when it says lost, else None."""
    entry = cov.get(source, {}).get(key)
    return entry if entry is not None and entry.lost else None


def lost_entries(cov: CoverageBySource, source: str) -> list[tuple[str, CoverageEntry]]:
    """Every lost key of ``source``, in the runner's order."""
    return [(key, e) for key, e in cov.get(source, {}).items() if e.lost]


def why(entry: CoverageEntry) -> str:
    """The entry's most common failure (``HTTP 404``), or that nothing answered."""
    return entry.why or "no sample taken"


def answered(entry: CoverageEntry) -> str:
    """``0/16`` (answered of expected samples)."""
    return f"{entry.answered}/{entry.expected}"
