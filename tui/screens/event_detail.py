"""Details of one event row: its fields, its data, and the evidence file it names."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from soak.safe_text import safe_line, safe_text
from tui.fmt import mmss
from tui.panes.events import EventRow

EVIDENCE_LIMIT = 40_000
"""Characters of an evidence file shown (the file itself is complete on disk)."""
BURST_LIMIT = 50


def evidence_path(run_dir: Path, name: str) -> Path | None:
    """The evidence file an event names, if it is inside the run directory."""
    try:
        root = run_dir.resolve()
        path = (root / name).resolve()
    except OSError:
        return None
    return path if path.is_relative_to(root) else None


def read_evidence(run_dir: Path, name: str) -> str:
    """The evidence file's text (pretty JSON when it is JSON), or why it cannot be shown."""
    path = evidence_path(run_dir, name)
    if path is None:
        return f"{name}: outside the run directory; not shown"
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return f"{path}: not readable ({e.strerror or e})"
    with contextlib.suppress(ValueError):  # not JSON: shown as it is
        raw = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    if len(raw) > EVIDENCE_LIMIT:
        raw = (
            raw[:EVIDENCE_LIMIT] + f"\n... ({len(raw) - EVIDENCE_LIMIT} more characters in {path})"
        )
    return raw


def detail_text(row: EventRow, run_dir: Path) -> str:
    """Everything about the row as display-safe text (escapes in the server's words, the
    data and the evidence shown as ``\\x1b``; the files keep the exact bytes)."""
    return safe_text(_detail(row, run_dir))


def _detail(row: EventRow, run_dir: Path) -> str:
    e = row.first.event
    out = [
        f"time      +{mmss(e.t)} ({e.t:.3f} s into the run), {e.wall or 'no wall time'}",
        f"kind      {e.kind}, severity {e.severity}",
        "",
        e.message,
    ]
    if e.data:
        out += ["", "data", json.dumps(dict(e.data), indent=2, ensure_ascii=False, default=str)]
    if len(row.events) > 1:
        out += ["", f"{len(row.events)} events in this burst:"]
        out += [f"  +{mmss(x.event.t)} {x.event.message}" for x in row.events[:BURST_LIMIT]]
        if len(row.events) > BURST_LIMIT:
            out.append(f"  ... {len(row.events) - BURST_LIMIT} more in events.jsonl")
    name = row.first.facts.evidence
    if name:
        out += ["", f"evidence  {run_dir / name}", read_evidence(run_dir, name)]
    return "\n".join(out)


class EventDetailScreen(ModalScreen[None]):
    """A scrollable view of one event."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", id="event-close")
    ]

    def __init__(self, row: EventRow, run_dir: Path) -> None:
        super().__init__()
        self.row = row
        self.run_dir = run_dir

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog detail"):
            kind = safe_line(self.row.first.event.kind)
            yield Label(Content(f"Event: {kind}"), classes="dialog-title")
            with VerticalScroll():
                # Content(...) not markup: messages and evidence contain square brackets.
                yield Static(Content(detail_text(self.row, self.run_dir)), id="event-body")

    def action_close(self) -> None:
        """Back to the monitor."""
        self.dismiss(None)
