"""Load generation: workers, barrier, prompt pools, the streaming SSE client, timing, statistics.

Never imports ``textual``, ``tui`` or ``soak`` (import-linter contracts in pyproject).
"""
