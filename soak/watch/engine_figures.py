"""An endpoint's figures over the load's window, from the two samples that bound it.

The engine watch keeps the good sample that opens the window and the one that closes it
(``soak.watch.engine``); the counters' growth between them gives the record the window's
preemptions, prefix-cache hit rate and speculative-decoding acceptance. A counter that
went down in between (a restart) counts from the restart. Where an engine computes a
ratio itself instead of exporting the counters (SGLang), its gauge at the end is used,
and ``method`` says which.
"""

from __future__ import annotations

from typing import Any

from probes.engine_metrics import EngineSample


def prefix_cache(first: EngineSample | None, last: EngineSample | None) -> dict[str, Any] | None:
    """Prefix-cache hits over queries in the window (vLLM counts tokens), or the engine's
    own hit-rate gauge at the end (SGLang). None when the engine exports neither."""
    hits = counter_delta(first, last, "prefix_cache_hits_total")
    queries = counter_delta(first, last, "prefix_cache_queries_total")
    if hits is not None and queries is not None:
        rate = hits / queries if queries else None
        return {"hits": hits, "queries": queries, "hit_rate": rate, "method": "counter delta"}
    gauge = last.values.get("prefix_cache_hit_rate") if last is not None else None
    if gauge is not None:
        return {"hit_rate": gauge, "method": "engine gauge at the end of the load"}
    return None


def spec_decode(first: EngineSample | None, last: EngineSample | None) -> dict[str, Any] | None:
    """Speculative decoding in the window: acceptance rate = accepted / draft tokens, mean
    acceptance length = 1 + accepted / drafts (vLLM); or the engine's own acceptance gauge
    (SGLang). None without speculative decoding."""
    drafts = counter_delta(first, last, "spec_decode_drafts_total")
    draft_tokens = counter_delta(first, last, "spec_decode_draft_tokens_total")
    accepted = counter_delta(first, last, "spec_decode_accepted_tokens_total")
    if drafts is not None and draft_tokens is not None and accepted is not None:
        return {
            "drafts": drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": accepted,
            "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "method": "counter delta",
        }
    gauge = last.values.get("spec_accept_rate") if last is not None else None
    if gauge is not None:
        return {"acceptance_rate": gauge, "method": "engine gauge at the end of the load"}
    return None


def counter_delta(first: EngineSample | None, last: EngineSample | None, key: str) -> float | None:
    """Growth of a counter over the window; after a reset (a restart), the count since it."""
    if first is None or last is None:
        return None
    b, a = first.values.get(key), last.values.get(key)
    if b is None or a is None:
        return None
    return a if a < b else a - b
