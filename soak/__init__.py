"""soaktop's headless core: config, phases, verdict, run record and the CLI.

Never imports ``textual`` or ``tui`` (import-linter contracts in pyproject).
"""

__version__ = "0.1.0"
