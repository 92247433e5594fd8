"""Which :class:`loadgen.request_source.RequestSource` a run's load sends from.

One place that turns the run's options into the source both generators ask for each
request's body: the prompt pool (the default), a trace's arrivals, a mix's classes. Every
source is built before the barrier (files read, prompts calibrated), never on the
measuring loop.
"""

from __future__ import annotations

from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import PoolSource, RequestSource
from soak.run.config import RunConfig


def request_source(cfg: RunConfig, pool: PromptPool, bodies: BodyBuilder) -> RequestSource:
    """The run's request source (``cfg`` is checked already)."""
    del cfg  # the pool's body for every request until a mix or a trace is given
    return PoolSource(pool, bodies)
