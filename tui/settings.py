"""Display settings: theme, ASCII mode, refresh interval, keymap, user themes.

Layered like the rest of soaktop: an explicit argument (the CLI flag) > environment
(``SOAKTOP_THEME``, ``SOAKTOP_ASCII``, ``SOAKTOP_REFRESH``) > config directory
(``$SOAKTOP_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/soaktop``, else ``~/.config/soaktop``)
> defaults. A bad value never stops the monitor: it falls back and leaves a notice that
the app shows once it is on screen. ``NO_COLOR`` is honoured by Textual itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from textual.theme import BUILTIN_THEMES, Theme

from themes import DEFAULT_THEME, SOAKTOP_THEMES, load_user_themes
from tui.keys import load_keymap

DEFAULT_REFRESH_S = 0.5
"""Half the runner's snapshot interval, so a new snapshot shows within half a second."""
MIN_REFRESH_S = 0.1


@dataclass(frozen=True)
class UiSettings:
    """Resolved display settings."""

    theme: str = DEFAULT_THEME
    ascii: bool = False
    """Plain ASCII glyphs instead of box drawing, blocks and sparkline cells."""
    refresh_s: float = DEFAULT_REFRESH_S
    """Seconds between reads of the run directory (raise it on a slow link)."""
    keymap: Mapping[str, str] = field(default_factory=dict)
    user_themes: tuple[Theme, ...] = ()
    notices: tuple[str, ...] = ()
    """What was ignored and why (shown as notifications once the app runs)."""


def config_dir(environ: Mapping[str, str]) -> Path:
    """Where keys.toml and themes/*.toml live."""
    if explicit := environ.get("SOAKTOP_CONFIG_DIR"):
        return Path(explicit).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "soaktop"


def locale_is_utf8(environ: Mapping[str, str], stream_encoding: str | None) -> bool:
    """Whether the terminal can be trusted with UTF-8 glyphs.

    The first of LC_ALL, LC_CTYPE, LANG that is set decides (as in libc); without any,
    the output stream's encoding does.
    """
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = environ.get(var)
        if value:
            low = value.lower()
            return "utf-8" in low or "utf8" in low
    return "utf" in (stream_encoding or "").lower()


def resolve_settings(
    theme: str | None = None,
    ascii: bool | None = None,
    refresh_s: float | None = None,
    environ: Mapping[str, str] | None = None,
    stream_encoding: str | None = None,
) -> UiSettings:
    """Settings from the arguments, the environment and the config directory."""
    env = os.environ if environ is None else environ
    notices: list[str] = []
    cdir = config_dir(env)
    keymap, key_notices = load_keymap(cdir / "keys.toml")
    notices += key_notices
    user_themes, theme_notices = load_user_themes(cdir / "themes")
    notices += theme_notices

    known = {*BUILTIN_THEMES, *SOAKTOP_THEMES, *(t.name for t in user_themes)}
    wanted = theme or env.get("SOAKTOP_THEME") or DEFAULT_THEME
    if wanted not in known:
        choices = ", ".join([*SOAKTOP_THEMES, *(t.name for t in user_themes)])
        notices.append(f"unknown theme {wanted!r}: using {DEFAULT_THEME} (themes: {choices})")
        wanted = DEFAULT_THEME

    if ascii is None:
        flag = env.get("SOAKTOP_ASCII", "").strip().lower()
        if flag in ("1", "true", "yes", "on"):
            ascii = True
        elif flag in ("0", "false", "no", "off"):
            ascii = False
        else:
            encoding = stream_encoding if stream_encoding is not None else sys.stdout.encoding
            ascii = not locale_is_utf8(env, encoding)

    if refresh_s is None and env.get("SOAKTOP_REFRESH"):
        try:
            refresh_s = float(env["SOAKTOP_REFRESH"])
        except ValueError:
            notices.append(
                f"SOAKTOP_REFRESH={env['SOAKTOP_REFRESH']!r} is not a number of seconds; "
                f"using {DEFAULT_REFRESH_S}"
            )
    if refresh_s is None:
        refresh_s = DEFAULT_REFRESH_S
    elif not refresh_s >= MIN_REFRESH_S:  # also catches NaN
        notices.append(f"refresh {refresh_s} s is below {MIN_REFRESH_S} s; using {MIN_REFRESH_S}")
        refresh_s = MIN_REFRESH_S

    return UiSettings(
        theme=wanted,
        ascii=ascii,
        refresh_s=refresh_s,
        keymap=keymap,
        user_themes=tuple(user_themes),
        notices=tuple(notices),
    )
