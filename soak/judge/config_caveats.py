"""The record's ``caveats``: what follows from how the run was made and limits what it
shows, in the spirit of seed 000's "What two hours can and cannot buy us" ("the test
cycles a fixed pool rather than recreating a production arrival distribution", "the
throughput denominator includes the drain time", "one two-hour measurement … not
randomized alternating trials") and seed 004's "Important caveat" ("small natural-output
scouts, not controlled speculative-speedup … endurance or p99 evidence").

A caveat is not a verdict reason: it changes no status. Each has a stable ``code`` and a
sentence with the run's own numbers. :func:`config_caveats` is pure and reads only the
record's parts (its config echo, load summary, identity, telemetry and matrix), so
finalize, ``recover`` and ``verify`` reach the same list from the same record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from soak.record.matrix import CellResult, MatrixSummary
from soak.record.models import Identity, LoadSummary
from soak.record.sections import RecordCaveat
from soak.record.telemetry import EngineSummary, RecordTelemetry

ISSUE_WINDOW_DEFINITION = (
    "divides only the output tokens of requests sent and finished inside the issue window "
    "by the issue seconds (a request still in flight when issuing stopped counts for nothing)"
)
"""What ``load.output_tokens_per_s_issue_window`` is (``soak.record.summary``)."""
MOST_ENDPOINTS_NAMED = 8
"""Endpoints whose occupancy a caveat names one by one (the rest are counted)."""


def config_caveats(
    config: Mapping[str, Any],
    load: LoadSummary | None,
    identity: Identity | None,
    telemetry: RecordTelemetry,
    matrix: MatrixSummary | None,
) -> list[RecordCaveat]:
    """The caveats that apply to this run, in a fixed order (none when nothing was
    measured: no barrier released, no matrix cell run)."""
    if matrix is not None:
        return _matrix_caveats(config, matrix)
    if load is None or not load.barrier_released:
        return []
    found = [
        _prompt_pool(load, identity),
        _loop_caveat(config, load),
        _drain(load),
        _caveat(
            "one_run",
            "One measurement of this recipe: one run, not repeated and not randomized "
            "alternating trials, so run-to-run variation is not measured.",
        ),
        _output_length(config.get("ignore_eos"), config.get("max_tokens"), _mean_output(load)),
        _caveat("concurrency_not_occupancy", _occupancy_words(load, telemetry.engines)),
        _temperature(config),
        _warmup(config),
    ]
    return [c for c in found if c is not None]


def _caveat(code: str, message: str) -> RecordCaveat:
    return RecordCaveat(code=code, message=message)


def _loop_caveat(config: Mapping[str, Any], load: LoadSummary) -> RecordCaveat:
    """Closed loop: a concurrency level. Open loop: a schedule, one seeded draw of it."""
    if load.offered_rate is None:
        return _caveat(
            "closed_loop",
            f"{load.workers_started:,} closed-loop workers: each sends its next request when "
            "its last one ends — a concurrency level, not an arrival distribution; latency "
            "under bursts is not measured.",
        )
    if config.get("arrival") == "trace":
        scale = config.get("time_scale") or 1
        return _caveat(
            "trace_replay",
            f"A replayed trace ({config.get('trace_file')}, time scale {scale:g}; its format, "
            "hash and calibration are in identity.prompt_pool.trace): open-loop arrivals at "
            "the trace's own times, latency from the intended send in ttft_from_intended_s "
            "and e2e_from_intended_s; the prompts are synthetic text of the trace's token "
            "counts, shared where its hash ids or prefixes say, not its content.",
        )
    return _caveat(
        "open_loop",
        f"Open-loop {config.get('arrival')} arrivals at {config.get('rate')} req/s (one "
        "seeded schedule): latency from the intended send is in ttft_from_intended_s and "
        "e2e_from_intended_s; a fixed prompt pool, not a production request mix.",
    )


def _prompt_pool(load: LoadSummary, identity: Identity | None) -> RecordCaveat | None:
    """A pool smaller than the requests sent was cycled (soak only: a matrix's prompts are
    unique synthetic ones)."""
    pool = identity.prompt_pool if identity is not None else None
    if pool is None or not pool.size or load.issued <= pool.size:
        return None
    kind = "synthetic" if (pool.source or "").startswith("synthetic") else "from a file"
    return _caveat(
        "prompt_pool_cycled",
        f"A fixed pool of {pool.size:,} distinct prompts ({kind}) was cycled: "
        f"{load.issued:,} requests sent each prompt about {load.issued / pool.size:,.1f} "
        "times, so prefix-cache hits are the pool's repeats, not real traffic's reuse.",
    )


def _drain(load: LoadSummary) -> RecordCaveat | None:
    """What the two throughput figures divide by (only when a drain was timed)."""
    if load.output_tokens_per_s is None or load.drain_s is None or load.elapsed_s is None:
        return None
    issue = load.issue_s or 0.0
    window = load.output_tokens_per_s_issue_window
    window_words = f"{window:,.3f} tok/s" if window is not None else "not computed"
    return _caveat(
        "drain_in_denominator",
        f"output_tokens_per_s ({load.output_tokens_per_s:,.3f} tok/s) divides all "
        f"{load.output_tokens:,} output tokens by the elapsed time including the drain: "
        f"{load.elapsed_s:,.2f} s = issue {issue:,.2f} s + drain {load.drain_s:,.2f} s. "
        f"output_tokens_per_s_issue_window ({window_words}) {ISSUE_WINDOW_DEFINITION}.",
    )


def _mean_output(load: LoadSummary) -> float | None:
    with_usage = load.completed - load.usage_missing
    return load.output_tokens / with_usage if with_usage > 0 else None


def _output_length(ignore_eos: Any, max_tokens: Any, mean: float | None) -> RecordCaveat | None:
    """Fixed (ignore_eos) or natural output length, with the mean the server reported."""
    if not isinstance(max_tokens, int):
        return None
    mean_words = (
        f"mean {mean:,.1f} output tokens per completed request"
        if mean is not None
        else "the mean output length is unknown: no usage was reported"
    )
    if ignore_eos:
        return _caveat(
            "output_length_fixed",
            f"Fixed output length: ignore_eos was sent, so every request asked for "
            f"max_tokens={max_tokens:,} ({mean_words}; an engine that ignores ignore_eos "
            "still stops at EOS).",
        )
    if mean is not None and mean >= max_tokens:  # every answer ran into the cap
        return _caveat(
            "output_length_natural",
            f"Natural output length: EOS honoured, capped at max_tokens={max_tokens:,}, "
            f"and every answer reached the cap ({mean_words}): the lengths were set by the "
            "cap here, not by the model, and need not be with another recipe.",
        )
    return _caveat(
        "output_length_natural",
        f"Natural output length: EOS honoured, capped at max_tokens={max_tokens:,}; "
        f"generated lengths varied ({mean_words}), so throughput and E2E also depend on "
        "how long the model chose to answer.",
    )


def _engine_words(e: EngineSummary) -> str:
    """``endpoint 0 ran at most 64 requests (mean 61.2), waiting up to 12``."""
    who = f"endpoint {e.endpoint}" if e.endpoint is not None else "an endpoint"
    if e.running_max is None:
        return f"{who} did not report its running requests"
    mean = f" (mean {e.running_mean:,.1f})" if e.running_mean is not None else ""
    waiting = f", waiting up to {e.waiting_max:,g}" if e.waiting_max is not None else ""
    return f"{who} ran at most {e.running_max:,g} requests{mean}{waiting}"


def _occupancy_words(load: LoadSummary, engines: list[EngineSummary]) -> str:
    """Client concurrency beside what each engine's ``/metrics`` said it ran."""
    client = (
        f"Client concurrency {load.requested_concurrency:,}"
        if load.offered_rate is None
        else f"An open-loop client at {load.offered_rate:,.1f} req/s"  # no worker count
    )
    head = f"{client} and the engines' sampled occupancy are separate measurements"
    if not engines:
        return (
            f"{head}: no engine occupancy was sampled (no engine metrics in this record), "
            "so how many requests the servers ran at once is unknown."
        )
    named = [_engine_words(e) for e in engines[:MOST_ENDPOINTS_NAMED]]
    if len(engines) > MOST_ENDPOINTS_NAMED:
        named.append(f"{len(engines) - MOST_ENDPOINTS_NAMED} more endpoints")
    queued = any((e.waiting_max or 0) > 0 for e in engines)
    tail = (
        "; waiting > 0: the engine queued requests the client had already sent."
        if queued
        else "; no request was seen waiting."
    )
    return f"{head}: {'; '.join(named)}{tail}"


def _temperature(config: Mapping[str, Any]) -> RecordCaveat | None:
    if config.get("temperature") is not None:
        return None
    lengths = "" if config.get("ignore_eos") else ", and the output lengths followed from it"
    return _caveat(
        "temperature_server_default",
        "No temperature was sent: the server's default sampling applied (its value is not "
        f"in this record){lengths}.",
    )


def _warmup(config: Mapping[str, Any]) -> RecordCaveat | None:
    spec = config.get("warmup")
    if not spec:
        return None
    return _caveat(
        "warmup_excluded",
        f"A warm-up ({spec}) ran before the judged window: its requests are journaled "
        "(phase warmup) but are in no figure, and the engine's caches were warm when the "
        "window opened.",
    )


def _matrix_caveats(config: Mapping[str, Any], matrix: MatrixSummary) -> list[RecordCaveat]:
    """A matrix scout's caveats (none before its first cell ran); occupancy is the highest
    ``max_running`` sampled in each cell's repetitions."""
    cells = [c for c in matrix.cells if c.reps]
    if not cells:
        return []
    spec = matrix.spec
    timed = sum(c.completed for c in cells)
    output = "fixed-output" if config.get("ignore_eos") else "natural-output"
    outputs = [t for c in cells for r in c.reps for t in r.output_tokens if t is not None]
    concurrencies = ", ".join(str(c) for c in spec.concurrency)
    found = [
        _caveat(
            "matrix_scout",
            f"A small {output} scout: {len(cells)} cells × {spec.reps} repetitions × "
            f"{spec.requests} timed requests ({timed:,} completed) — not controlled "
            "speculative-speedup, p99 or endurance evidence.",
        ),
        _caveat(
            "closed_loop",
            f"Closed-loop workers at each cell's concurrency ({concurrencies}): each sends "
            "its next request when its last one ends — a concurrency level, not an arrival "
            "distribution.",
        ),
        _caveat(
            "one_run",
            f"One run of this recipe: each cell's {spec.reps} repetitions ran back to back "
            "in it, not as randomized alternating trials.",
        ),
        _output_length(
            config.get("ignore_eos"),
            matrix.max_tokens,
            sum(outputs) / len(outputs) if outputs else None,
        ),
        _caveat("concurrency_not_occupancy", _cell_occupancy(cells)),
        _temperature(config),
    ]
    if spec.warmup:
        found.append(
            _caveat(
                "warmup_excluded",
                f"Each cell began with {spec.warmup} untimed warm-up request"
                f"{'s' * (spec.warmup != 1)} per worker, in no figure.",
            )
        )
    return [c for c in found if c is not None]


def _cell_occupancy(cells: list[CellResult]) -> str:
    """Each cell's client concurrency beside the highest occupancy sampled in it."""
    named = [
        f"{c.label}: "
        + (f"at most {c.max_running:g} running" if c.max_running is not None else "not sampled")
        for c in cells
    ]
    return (
        "Client concurrency and the engines' sampled occupancy are separate measurements: "
        + "; ".join(named)
        + "."
    )
