"""Textual themes and the stylesheet: the only place colour is defined.

``SOAKTOP_THEMES`` holds dark (the default), light, high-contrast and ansi (the
terminal's own palette); ``load_user_themes`` adds one theme per TOML file of the config
directory; ``STYLESHEET`` uses theme variables only, so every theme restyles every pane.
"""

from pathlib import Path

from themes.builtin import DEFAULT_THEME, SOAKTOP_THEMES
from themes.user import load_user_themes

STYLESHEET = Path(__file__).with_name("soaktop.tcss")

__all__ = ["DEFAULT_THEME", "SOAKTOP_THEMES", "STYLESHEET", "load_user_themes"]
