"""Display settings: flags > environment > config directory > defaults; bad values fall back."""

from __future__ import annotations

from pathlib import Path

from tui.keys import validate_keymap
from tui.settings import locale_is_utf8, resolve_settings


def env(tmp_path: Path, **values: str) -> dict[str, str]:
    """An environment whose config directory is empty unless a test fills it."""
    return {"SOAKTOP_CONFIG_DIR": str(tmp_path), "LANG": "en_US.UTF-8", **values}


def test_defaults(tmp_path: Path) -> None:
    s = resolve_settings(environ=env(tmp_path))
    assert (s.theme, s.ascii, s.refresh_s, s.notices) == ("dark", False, 0.5, ())


def test_flag_beats_environment(tmp_path: Path) -> None:
    e = env(tmp_path, SOAKTOP_THEME="light", SOAKTOP_REFRESH="5")
    assert resolve_settings(environ=e).theme == "light"
    assert resolve_settings(environ=e).refresh_s == 5.0
    assert resolve_settings(theme="high-contrast", refresh_s=2, environ=e).theme == "high-contrast"


def test_unknown_theme_falls_back_to_dark_with_a_notice(tmp_path: Path) -> None:
    s = resolve_settings(theme="solarised", environ=env(tmp_path))
    assert s.theme == "dark"
    assert "unknown theme 'solarised'" in s.notices[0]
    assert "high-contrast" in s.notices[0]


def test_ascii_follows_the_locale_unless_told() -> None:
    assert locale_is_utf8({"LANG": "en_US.UTF-8"}, None)
    assert not locale_is_utf8({"LC_ALL": "C", "LANG": "en_US.UTF-8"}, "utf-8")
    assert not locale_is_utf8({}, "ascii")
    assert resolve_settings(environ={"LANG": "C", "SOAKTOP_CONFIG_DIR": "/nonexistent"}).ascii
    assert not resolve_settings(ascii=False, environ={"LANG": "C"}).ascii
    assert resolve_settings(environ={"SOAKTOP_ASCII": "1", "LANG": "C.UTF-8"}).ascii


def test_bad_refresh_values(tmp_path: Path) -> None:
    s = resolve_settings(environ=env(tmp_path, SOAKTOP_REFRESH="fast"))
    assert s.refresh_s == 0.5 and "SOAKTOP_REFRESH" in s.notices[0]
    assert resolve_settings(refresh_s=0.0, environ=env(tmp_path)).refresh_s == 0.1


def test_user_theme_and_keymap_from_the_config_directory(tmp_path: Path) -> None:
    (tmp_path / "themes").mkdir()
    (tmp_path / "themes" / "solarized.toml").write_text(
        'primary = "#268BD2"\nbackground = "#002B36"\ndark = true\n'
        '[variables]\nfooter-key-foreground = "#B58900"\n'
    )
    (tmp_path / "themes" / "broken.toml").write_text('primary = "not a colour"\n')
    (tmp_path / "keys.toml").write_text('quit = "x"\nfly = "f"\n')
    s = resolve_settings(theme="solarized", environ=env(tmp_path))
    assert s.theme == "solarized"
    assert [t.name for t in s.user_themes] == ["solarized"]
    assert s.keymap == {"quit": "x"}
    assert any("broken.toml" in n and "not a colour" in n for n in s.notices)
    assert any("unknown key id 'fly'" in n for n in s.notices)


def test_keymap_values_must_be_key_names() -> None:
    keymap, notices = validate_keymap({"stop": 3, "mark": " n "}, "keys.toml")
    assert keymap == {"mark": "n"}
    assert "stop must be a key name" in notices[0]
