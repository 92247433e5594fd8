"""One module per pane; each draws a ``RunView`` and says so when it has no source."""

from tui.panes.base import Pane
from tui.panes.concurrency import ConcurrencyPane
from tui.panes.events import EventsPane
from tui.panes.gates import GatesPane
from tui.panes.gpus import GpuPane
from tui.panes.header import HeaderPane
from tui.panes.latency import LatencyPane
from tui.panes.throughput import ThroughputPane

__all__ = [
    "ConcurrencyPane",
    "EventsPane",
    "GatesPane",
    "GpuPane",
    "HeaderPane",
    "LatencyPane",
    "Pane",
    "ThroughputPane",
]
