"""A trace replay over shards: the calibrated trace pool across the pipe, whole.

Every shard replays the whole trace's schedule and sends its arrivals ``g % N == k``
(:class:`soak.run.shard_main.ShardOpenLoop`), so each needs what the coordinator
calibrated — the trace's arrivals and the text's calibration — not the file (a shard on
another host may not have it). ``trace_spec`` is what crosses; ``trace_pool_from_spec``
rebuilds the very pool, so :class:`loadgen.trace_source.TraceSource` writes arrival
``g``'s prompt in the shard exactly as one process would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.prompts import Prompt
from loadgen.trace_source import TracePool
from loadgen.traces import Trace, TraceArrival


def trace_spec(pool: TracePool) -> dict[str, Any]:
    """The replay's pool as JSON-able values (:func:`trace_pool_from_spec` reverses it)."""
    trace = pool.trace
    assert trace is not None
    return {
        "prompts": [[p.id, p.text, p.nominal_tokens] for p in pool.prompts],
        "source": pool.source,
        "time_scale": pool.time_scale,
        "seed": pool.seed,
        "tokens_per_word": pool.tokens_per_word,
        "fixed_tokens": pool.fixed_tokens,
        "calibrated": pool.calibrated,
        "checks": [list(c) for c in pool.checks],
        "trace": {
            "path": str(trace.path),
            "format": trace.format,
            "sha256": trace.sha256,
            "arrivals": [
                [a.offset_s, a.input_tokens, a.output_tokens, list(a.blocks), a.line]
                for a in trace.arrivals
            ],
        },
    }


def trace_pool_from_spec(spec: dict[str, Any]) -> TracePool:
    """The coordinator's calibrated trace pool, rebuilt in a shard."""
    t = spec["trace"]
    trace = Trace(
        path=Path(t["path"]),
        format=t["format"],
        sha256=str(t["sha256"]),
        arrivals=tuple(
            TraceArrival(float(at), int(inp), int(out), tuple(int(b) for b in blocks), int(line))
            for at, inp, out, blocks, line in t["arrivals"]
        ),
    )
    return TracePool(
        prompts=tuple(Prompt(int(i), str(text), n) for i, text, n in spec["prompts"]),
        source=str(spec["source"]),
        trace=trace,
        time_scale=float(spec["time_scale"]),
        seed=int(spec["seed"]),
        tokens_per_word=float(spec["tokens_per_word"]),
        fixed_tokens=float(spec["fixed_tokens"]),
        calibrated=bool(spec["calibrated"]),
        checks=tuple((int(a), int(b)) for a, b in spec["checks"]),
    )
