"""``identity.prompt_pool.trace``: which trace a replay sent, and how its text was made
(``loadgen.trace_source.TracePool.describe``; schema 1.4, only for ``--arrival trace:FILE``)."""

from __future__ import annotations

from soak.record.shape import Section


class TraceFacts(Section):
    """The replayed trace: the file (its path, format and hash) and the calibration."""

    path: str | None = None
    """The trace file as given (``<redacted>`` with --redact)."""
    format: str | None = None
    """``mooncake``, ``azure``, ``burstgpt`` or ``soaktop``."""
    sha256: str | None = None
    """Of the file's bytes (``sha256sum FILE``)."""
    arrivals: int | None = None
    duration_s: float | None = None
    """The last arrival's offset divided by ``time_scale``: the replay's length."""
    time_scale: float | None = None
    input_tokens_total: int | None = None
    output_tokens_total: int | None = None
    shared_prefix_arrivals: int | None = None
    """Arrivals whose first block (a hash id, a named prefix) leads another's prompt too."""
    skipped: dict[str, int] | None = None
    """Lines left out, by reason (the public formats' 0-output failures)."""
    reordered: int | None = None
    """Lines that came before an earlier line's time (the arrivals were sorted)."""
    tokens_per_word: float | None = None
    """Server tokens per filler word from ``/tokenize`` (None: not calibrated)."""
    fixed_tokens: float | None = None
    """Tokens each prompt costs beyond its text (template, BOS), from ``/tokenize``."""
    calibration_checks: list[list[int]] | None = None
    """(target, the server's count) of one prompt per power-of-two length bucket."""
    calibration_worst_tokens: int | None = None
