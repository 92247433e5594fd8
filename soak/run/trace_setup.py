"""A trace replay's parts, built before the barrier: the calibrated pool, the schedule,
the source and the open-loop generator that ends when the trace does.

``--arrival trace:FILE`` reuses :class:`loadgen.open_loop.OpenLoopGenerator` with the
trace's own offsets divided by ``time_scale``; the issue window has no timer of its own
unless ``duration_s`` was given (it shortens the replay): it closes right after the last
arrival is sent ("trace replayed"), or at ``max_requests``. What each arrival sends is
:class:`loadgen.trace_source.TraceSource`'s, its text calibrated here with the server's
``/tokenize`` (:func:`loadgen.trace_source.calibrate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.envelope import RequestResult
from loadgen.open_loop import OpenLoopGenerator
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import RequestSource
from loadgen.trace_source import TracePool, TraceSource, calibrate
from loadgen.traces import Trace, TraceError, read_trace
from loadgen.workers import LoadGenerator, LoadPlan, StreamingClient
from soak.run.config_arrival import trace_cap
from soak.run.identity import count_tokens, tokenize_count

if TYPE_CHECKING:
    from soak.run.config import RunConfig

REPLAYED = "trace replayed"
"""The stop reason when the last arrival has been sent."""


def trace_of(cfg: RunConfig) -> Trace:
    """The run's parsed trace (checked with the config, so it parses)."""
    assert cfg.trace_file is not None
    return read_trace(Path(cfg.trace_file))  # a str in a config rebuilt by ``recover``


def time_scale(cfg: RunConfig) -> float:
    """The replay's speed-up (1 when not given)."""
    return cfg.time_scale if cfg.time_scale is not None else 1.0


def scaled_offsets(cfg: RunConfig) -> list[float]:
    """Each arrival's intended offset from the window's start, in seconds."""
    scale = time_scale(cfg)
    return [a.offset_s / scale for a in trace_of(cfg).arrivals]


def in_flight_cap(cfg: RunConfig) -> int:
    """``max_in_flight``, else the default for the trace's busiest minute (scaled)."""
    return cfg.max_in_flight if cfg.max_in_flight is not None else trace_cap(scaled_offsets(cfg))


def offered_rate(
    cfg: RunConfig, lo_s: float, hi_s: float, paused: Sequence[tuple[float, float]] = ()
) -> float | None:
    """Arrivals the trace offered in ``[lo_s, hi_s]`` (offsets from the release) ÷ the
    span, less those inside an operator's pause (``paused``, ``[a, b)`` spans: withheld,
    not offered). The end is inclusive: a replay's window closes at its last arrival's
    send. None when the file cannot be read any more (``recover`` of a run whose trace
    moved, or whose config has it redacted)."""
    try:
        offsets = scaled_offsets(cfg)
    except TraceError:
        return None
    count = sum(1 for t in offsets if lo_s <= t <= hi_s and not any(a <= t < b for a, b in paused))
    return count / (hi_s - lo_s)


async def trace_pool(cfg: RunConfig, headers: dict[str, str]) -> PromptPool:
    """The trace's text material, calibrated against the first endpoint's ``/tokenize``
    (the bare text for tokens per word; the text as the load sends it for the fixed cost)."""
    base = cfg.endpoints[0]

    async def bare(text: str) -> int | None:
        return await count_tokens(base, cfg.model, text, headers)

    async def as_sent(text: str) -> int | None:
        if cfg.api != "chat":
            return await bare(text)
        return await count_chat_tokens(base, cfg.model, text, headers)

    return await calibrate(
        trace_of(cfg),
        time_scale=time_scale(cfg),
        seed=cfg.pool_seed,
        count_text=bare,
        count_prompt=as_sent,
    )


async def count_chat_tokens(
    base: str, model: str, text: str, headers: dict[str, str]
) -> int | None:
    """The server's count of ``text`` as one user message through its chat template
    (``POST /tokenize`` with ``messages``; None if unsupported)."""
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": text}]}
    return await tokenize_count(base, body, headers)


def trace_source(pool: PromptPool, bodies: BodyBuilder) -> TraceSource:
    """The replay's request source (``pool`` is :func:`trace_pool`'s)."""
    if not isinstance(pool, TracePool):
        raise TypeError(f"a trace replay needs its calibrated pool, not {pool.source}")
    return TraceSource(pool, bodies)


class _Replay:
    """The offsets, then a stop once the last one was handed out (its request is sent
    before the generator asks for the next offset)."""

    def __init__(self, offsets: list[float]) -> None:
        self.offsets = offsets
        self.gen: LoadGenerator | None = None

    def __iter__(self) -> Iterator[float]:
        yield from self.offsets
        if self.gen is not None:
            self.gen.stop_issuing(REPLAYED)


def trace_generator(
    cfg: RunConfig,
    plan: LoadPlan,
    client: StreamingClient,
    pool: PromptPool,
    bodies: BodyBuilder,
    on_result: Callable[[RequestResult], None],
    source: RequestSource,
) -> OpenLoopGenerator:
    """The open-loop scheduler on the trace's schedule, sending from ``source`` (the
    run's :func:`soak.run.load_source.request_source`: the trace's)."""
    replay = _Replay(scaled_offsets(cfg))
    gen = OpenLoopGenerator(
        plan,
        client,
        pool,
        bodies,
        on_result,
        iter(replay),
        in_flight_cap(cfg),
        source=source,
    )
    replay.gen = gen
    return gen


def replay_words(cfg: RunConfig) -> str:
    """The replay in words for the load phase's event: the trace, its length, and what
    shortens it."""
    trace = trace_of(cfg)
    span = trace.duration_s / time_scale(cfg)
    words = (
        f"replaying {trace.format} trace {cfg.trace_file} ({len(trace.arrivals):,} arrivals "
        f"over {span:,.2f} s at time scale {time_scale(cfg):g})"
    )
    cuts = []
    if cfg.duration_s is not None and cfg.duration_s < span:
        cuts.append(f"--duration {cfg.duration_s:g} s")
    if cfg.max_requests is not None and cfg.max_requests < len(trace.arrivals):
        cuts.append(f"--max-requests {cfg.max_requests:,}")
    return words + (f", shortened by {' and '.join(cuts)}" if cuts else "")
