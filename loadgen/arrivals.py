"""Seeded open-loop arrival schedules: the intended send offsets of an issue window.

An open-loop load sends each request at a time fixed in advance, whatever the server does
(unlike the closed loop, where a worker's next request waits for its last). The schedule
is an iterator of offsets in seconds from the window's start, drawn from numpy's
``Generator`` seeded by ``--arrival-seed`` so a run's schedule is reproducible:

- ``constant``: one request every ``1/rate`` seconds (CV 0);
- ``poisson``: exponential gaps of mean ``1/rate`` (CV 1);
- ``gamma``: gamma gaps with coefficient of variation ``burstiness`` — shape
  ``k = 1/CV²``, scale ``1/(rate·k)`` (mean ``1/rate``; CV 1 is Poisson, above 1 bursty),
  as in vLLM's benchmark ``--burstiness``.

The first arrival is at offset 0 (the window opens with a request). Gaps are drawn in
blocks of :data:`BLOCK` and handed out as Python floats: one numpy call per block, not
per request, so the scheduler's cost per arrival is a list step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

ArrivalModel = Literal["constant", "poisson", "gamma"]
ARRIVAL_MODELS: tuple[ArrivalModel, ...] = ("constant", "poisson", "gamma")
BLOCK = 4096
"""Gaps drawn per numpy call: large enough that the draw is noise per request, small
enough that a short run does not draw far past its end."""


def gap_block(
    model: ArrivalModel, rate: float, burstiness: float | None, rng: np.random.Generator, n: int
) -> np.ndarray:
    """``n`` inter-arrival gaps in seconds, mean ``1/rate``, for ``model``."""
    mean = 1.0 / rate
    if model == "constant":
        return np.full(n, mean)
    if model == "poisson":
        return rng.exponential(mean, n)
    if burstiness is None:
        raise ValueError("the gamma model needs a burstiness (its coefficient of variation)")
    shape = 1.0 / (burstiness * burstiness)
    return rng.gamma(shape, mean / shape, n)


def arrival_offsets(
    model: ArrivalModel, rate: float, burstiness: float | None = None, seed: int = 0
) -> Iterator[float]:
    """The intended send offsets (seconds from the window's start), unbounded: the caller
    stops at its window's end or request count."""
    if not rate > 0:
        raise ValueError(f"rate must be above 0 requests/s, not {rate!r}")
    rng = np.random.default_rng(seed)
    at = 0.0
    while True:
        gaps = gap_block(model, rate, burstiness, rng, BLOCK)
        # Offsets of this block: the carried start, then the running sum of all but the
        # last gap; the last gap carries over to the next block.
        offsets = np.empty(BLOCK)
        offsets[0] = at
        np.cumsum(gaps[:-1], out=offsets[1:])
        offsets[1:] += at
        at = float(offsets[-1] + gaps[-1])
        yield from offsets.tolist()
