"""User themes: one TOML file per theme in ``<config dir>/themes/``.

A file holds the fields of ``textual.theme.Theme`` at the top level (``name`` defaults
to the file name), for example::

    primary = "#268BD2"
    background = "#002B36"
    foreground = "#EEE8D5"
    dark = true
    [variables]
    footer-key-foreground = "#B58900"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

_COLOURS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_FLAGS = ("dark", "ansi")
_FLOATS = ("luminosity_spread", "text_alpha")


def load_user_themes(directory: Path) -> tuple[list[Theme], list[str]]:
    """Every valid theme file in ``directory`` and one notice per file left out."""
    themes: list[Theme] = []
    notices: list[str] = []
    if not directory.is_dir():
        return themes, notices
    for path in sorted(directory.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            themes.append(theme_from_mapping(data, default_name=path.stem))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as e:
            notices.append(f"theme file {path}: {e}")
    return themes, notices


def theme_from_mapping(data: dict[str, Any], default_name: str) -> Theme:
    """A Theme from a TOML table; ``ValueError`` names the field and what is allowed."""
    allowed = {"name", "variables", *_COLOURS, *_FLAGS, *_FLOATS}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if "primary" not in data:
        raise ValueError('primary is required (a colour such as "#268BD2")')
    kwargs: dict[str, Any] = {"name": name.strip()}
    for key in _COLOURS:
        if key in data:
            kwargs[key] = _colour(key, data[key])
    for key in _FLAGS:
        if key in data:
            if not isinstance(data[key], bool):
                raise ValueError(f"{key} must be true or false, got {data[key]!r}")
            kwargs[key] = data[key]
    for key in _FLOATS:
        if key in data:
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
                raise ValueError(f"{key} must be a number from 0 to 1, got {v!r}")
            kwargs[key] = float(v)
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in variables.items()
    ):
        raise ValueError("[variables] must map names to strings")
    kwargs["variables"] = dict(variables)
    return Theme(**kwargs)


def _colour(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a colour string, got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(
            f'{key}: {value!r} is not a colour (e.g. "#268BD2", "ansi_blue")'
        ) from None
    return value
