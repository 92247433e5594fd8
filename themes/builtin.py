"""The four built-in themes."""

from __future__ import annotations

from textual.theme import Theme

DEFAULT_THEME = "dark"

SOAKTOP_THEMES: dict[str, Theme] = {
    theme.name: theme
    for theme in (
        Theme(
            name="dark",
            primary="#4C9BE8",
            secondary="#2E6DA4",
            accent="#E8A33D",
            warning="#E8A33D",
            error="#E5534B",
            success="#57AB5A",
            foreground="#D6DCE4",
            background="#14171C",
            surface="#1B1F26",
            panel="#242A35",
            dark=True,
        ),
        Theme(
            name="light",
            primary="#1F5FA8",
            secondary="#3A7BC8",
            accent="#B5651D",
            warning="#9A6700",
            error="#C62828",
            success="#1B7F3B",
            foreground="#1F2328",
            background="#FAFAF7",
            surface="#F0F0EB",
            panel="#E2E5E0",
            dark=False,
            variables={"footer-key-foreground": "#1F5FA8"},
        ),
        Theme(
            name="high-contrast",
            primary="#FFFF00",
            secondary="#00FFFF",
            accent="#FF00FF",
            warning="#FFFF00",
            error="#FF5555",
            success="#00FF00",
            foreground="#FFFFFF",
            background="#000000",
            surface="#000000",
            panel="#202020",
            dark=True,
            luminosity_spread=0.3,
            text_alpha=1.0,
            variables={
                "footer-key-foreground": "#FFFF00",
                "block-cursor-background": "#FFFF00",
                "block-cursor-foreground": "#000000",
                "border": "#FFFFFF",
                "border-blurred": "#C0C0C0",
            },
        ),
        # The terminal's own 16 colours: whatever palette the operator configured.
        Theme(
            name="ansi",
            ansi=True,
            primary="ansi_blue",
            secondary="ansi_cyan",
            accent="ansi_magenta",
            warning="ansi_yellow",
            error="ansi_red",
            success="ansi_green",
            foreground="ansi_default",
            background="ansi_default",
            surface="ansi_default",
            panel="ansi_default",
            boost="ansi_default",
            dark=True,
            variables={
                "ansi-background": "ansi_black",
                "ansi-foreground": "ansi_white",
                "border-blurred": "ansi_black",
                "block-cursor-foreground": "ansi_black",
                "block-cursor-background": "ansi_white",
                "input-cursor-background": "ansi_black",
                "input-cursor-foreground": "ansi_bright_white",
                "input-selection-background": "ansi_bright_blue",
                "input-selection-foreground": "ansi_black",
                "footer-key-foreground": "ansi_magenta",
            },
        ),
    )
}
