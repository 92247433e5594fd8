"""The Textual monitor: a viewer of the runner's run directory (no measurement here).

``tui.frontend.TuiFrontend`` is what the CLI calls (live follow, attach, view);
``tui.entry.main`` is the console script that hands it to ``soak.cli.main.main``.
"""
