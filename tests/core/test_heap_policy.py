"""The load's garbage-collector policy (soak.run.heap_policy), on the real collector."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from soak.run.heap_policy import SWEEP_S, YOUNG_THRESHOLD, LoadHeap


class _Node:
    """A tracked object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: Any = None


def _cycle() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


def test_the_start_up_is_frozen_and_given_back_after_the_load() -> None:
    kept = [_Node() for _ in range(1000)]  # the start-up's objects: alive for the load
    heap = LoadHeap()
    try:
        asyncio.run(heap.settle())
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)  # a full collection no longer walks them
        assert heap._after_collection in gc.callbacks
    finally:
        heap.close()
    assert gc.get_freeze_count() == 0
    assert heap._after_collection not in gc.callbacks


def test_the_young_generation_is_collected_less_often_during_the_load_only() -> None:
    before = gc.get_threshold()
    heap = LoadHeap()
    try:
        asyncio.run(heap.settle())
        young, middle, old = gc.get_threshold()
        assert young == max(before[0], YOUNG_THRESHOLD) > 700
        assert (middle, old) == before[1:]  # the older generations' thresholds are kept
    finally:
        heap.close()
    assert gc.get_threshold() == before


def test_survivors_of_each_full_collection_are_frozen_and_garbage_still_goes() -> None:
    heap = LoadHeap()
    try:
        asyncio.run(heap.settle())
        before = gc.get_freeze_count()
        alive = [_Node() for _ in range(500)]  # the load's live requests
        gc.collect()  # a full collection during the load
        assert heap.frozen_after == 1
        assert gc.get_freeze_count() >= before + len(alive)
        # A cycle that became garbage after the freeze is still reclaimed (young).
        young = weakref.ref(_cycle())
        gc.collect(0)
        assert young() is None
    finally:
        heap.close()


def test_every_sweep_interval_one_full_collection_walks_the_frozen_too() -> None:
    now = [0.0]
    heap = LoadHeap(clock=lambda: now[0])
    try:
        asyncio.run(heap.settle())
        garbage = _cycle()
        gone = weakref.ref(garbage)
        gc.collect()  # survives (still referenced) and is frozen
        del garbage  # now garbage, but frozen: a full collection does not see it
        gc.collect()
        assert gone() is not None
        now[0] = SWEEP_S + 1.0
        gc.collect()  # the sweep is due: the frozen objects are given back...
        assert heap.sweeps == 0 and gc.get_freeze_count() == 0
        gc.collect()  # ...and the next full collection walks them: the cycle goes
        assert gone() is None
        assert heap.sweeps == 1 and gc.get_freeze_count() > 0  # frozen again after it
    finally:
        heap.close()
