"""Which :class:`loadgen.request_source.RequestSource` a run's load sends from.

One place that turns the run's options into the source both generators ask for each
request's body: the prompt pool (the default), a trace's arrivals, a mix's classes. Every
source is built before the barrier (files read, prompts calibrated), never on the
measuring loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import PoolSource, RequestSource
from soak.run.config import RunConfig
from soak.run.mix_setup import mix_source
from soak.run.trace_setup import trace_source


def request_source(
    cfg: RunConfig,
    pool: PromptPool,
    bodies: BodyBuilder,
    class_pools: Mapping[str, PromptPool] | None = None,
) -> RequestSource:
    """The run's request source (``cfg`` is checked already; ``class_pools``: a mix's
    classes' own pools, ``RunState.class_pools``)."""
    if cfg.mix is not None:  # each request drawn from a weighted class (loadgen.mix)
        return mix_source(cfg, pool, class_pools or {})
    if cfg.arrival == "trace":  # arrival k sends the trace's line k (a calibrated pool)
        return trace_source(pool, bodies)
    del cfg  # the pool's body for every request until a mix or a trace is given
    return PoolSource(pool, bodies)
