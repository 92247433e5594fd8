"""Screens: the monitor itself and the dialogs it opens."""

from tui.screens.dialogs import ConfirmScreen, MarkScreen, QuitScreen
from tui.screens.event_detail import EventDetailScreen
from tui.screens.help import HelpScreen
from tui.screens.monitor import MonitorScreen

__all__ = [
    "ConfirmScreen",
    "EventDetailScreen",
    "HelpScreen",
    "MarkScreen",
    "MonitorScreen",
    "QuitScreen",
]
