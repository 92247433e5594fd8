"""``shards`` of :class:`soak.run.config.RunConfig`, checked against the rest of the run.

``shards`` N > 1 splits the closed loop's workers over N load processes on this host
(:mod:`soak.run.shards`). This is the capability's first step: a closed-loop steady load.
Everything a sharded run cannot do yet (an open loop, a trace, conversations, a mix,
stages, a sweep, the matrix, ``auto``) is refused here in words naming the option, the
value and "not yet supported with --shards", so nobody gets a silently unsharded run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import BeforeValidator, Field

if TYPE_CHECKING:
    from soak.run.config import RunConfig

MAX_SHARDS: Final = 64
"""Most shards: one per core of a large host; more processes than cores only add lag."""
NOT_YET: Final = "not yet supported with --shards"


def parse_shards(value: Any) -> Any:
    """``auto`` (one per spare core) is a later step: refused in words, not as a bad int."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        raise ValueError(
            f"shards = 'auto' is {NOT_YET} (this soaktop takes a number of shards, "
            f"1 to {MAX_SHARDS}): give --shards N"
        )
    return value


Shards = Annotated[int, Field(ge=1, le=MAX_SHARDS), BeforeValidator(parse_shards)]
"""``RunConfig.shards``: load processes on this host (1: the runner's own loop)."""


def shards_problem(cfg: RunConfig) -> str | None:
    """What the run asks for that ``shards`` N > 1 cannot do yet, in words; None if
    nothing (or no sharding)."""
    n = cfg.shards
    if n == 1:
        return None
    unsupported = [
        ("matrix", cfg.matrix),
        ("arrival", None if cfg.arrival == "closed" else cfg.arrival),
        ("turns", None if cfg.turns == 1 else cfg.turns),
        ("mix", None if cfg.mix is None else "a mixed load"),
        ("stages", cfg.stages),
        ("sweep", cfg.sweep),
    ]
    for option, value in unsupported:
        if value is not None:
            words = f"{value!r}" if isinstance(value, str) else f"{value}"
            return (
                f"shards = {n}: {option} = {words} is {NOT_YET} (step 1 shards a "
                f"closed-loop steady load on one host): drop --{option.replace('_', '-')} "
                "or --shards"
            )
    if cfg.concurrency < n:
        return (
            f"shards = {n}: concurrency = {cfg.concurrency} gives a shard no worker; "
            f"ask for at most {cfg.concurrency} shards, or a concurrency of {n} or more"
        )
    return None
