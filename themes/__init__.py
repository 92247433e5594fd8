"""Textual themes and stylesheets: the only place colour is defined (arrives with the TUI)."""
