"""``shards`` of :class:`soak.run.config.RunConfig`, checked against the rest of the run.

``shards`` N > 1 splits the closed loop's workers over N load processes on this host
(:mod:`soak.run.shards`), or an open loop's arrival schedule — a rate's, with its stages
or sweep, or a trace's — by arrival index (:mod:`soak.run.shards_open`). Everything a
sharded run cannot do yet (conversations, a mix, a closed loop's stages or sweep, the
matrix) is refused here in words naming the option, the value and "not yet supported
with --shards", so nobody gets a silently unsharded run.

``shards = "auto"`` is resolved when the config is built (:func:`resolve_auto`): one
shard per core the machine can spare (one is the coordinator's), never more than the
streams need (one process carries ``STREAMS_PER_SHARD`` paced streams: CLIENT_COST.md).
The config keeps the number and, in ``shards_auto``, the request and its reason in words
(``auto: 2 shards (3 spare cores of 4, 512 streams need 2)``); a load that cannot be
sharded yet gets 1, said so. An open loop's streams are its requests in flight: its
``max_in_flight`` (or the rate's default cap, said so), never its ``concurrency``, which
only warms connections — and never more shards than the cap has slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from ipaddress import ip_address
from typing import TYPE_CHECKING, Annotated, Any, Final
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field

from soak.record.split_read import usable_cores
from soak.run.config_arrival import default_max_in_flight

if TYPE_CHECKING:
    from soak.run.config import RunConfig

MAX_SHARDS: Final = 64
"""Most shards: one per core of a large host; more processes than cores only add lag."""
NOT_YET: Final = "not yet supported with --shards"
STREAMS_PER_SHARD: Final = 256
"""Paced streams one shard carries within its CPU budget (CLIENT_COST.md: one process is
fine at 256 paced streams; it falls behind towards 1,024)."""
AUTO_MARK: Final = "auto"
"""``shards_auto`` before :func:`resolve_auto` ran: asked for, not yet resolved."""


def is_auto(value: Any) -> bool:
    """Whether ``shards`` was given as ``auto`` (any case)."""
    return isinstance(value, str) and value.strip().lower() == AUTO_MARK


def mark_auto(data: Any) -> Any:
    """The raw config with ``shards = "auto"`` held as 1 and marked in ``shards_auto``
    (a model-level ``before`` step: :func:`resolve_auto` sets the number once the rest
    of the config is checked). A config read back (a number and its words) is as given."""
    if isinstance(data, dict) and is_auto(data.get("shards")):
        return {**data, "shards": 1, "shards_auto": AUTO_MARK}
    return data


def parse_shards(value: Any) -> Any:
    """A number of shards; any other text is refused in words, not as a bad int."""
    if isinstance(value, str) and not value.strip().lstrip("+").isdigit():
        raise ValueError(
            f"shards = {value!r}: give a number of shards, 1 to {MAX_SHARDS}, or 'auto' "
            "(one per spare core, as many as the concurrency needs)"
        )
    return value


def is_local(endpoints: Sequence[str]) -> bool:
    """Whether an endpoint is on this host's loopback (the server shares its cores)."""
    for url in endpoints:
        host = (urlsplit(url).hostname or "").lower()
        if host == "localhost":
            return True
        try:
            if ip_address(host).is_loopback:
                return True
        except ValueError:
            continue
    return False


def auto_shards(
    concurrency: int,
    cores: int,
    server_local: bool = False,
    blocked: str | None = None,
    streams: str | None = None,
) -> tuple[int, str]:
    """``--shards auto``: the number of shards and why, in words. One per spare core
    (``cores`` less one for the coordinator), at most one per ``STREAMS_PER_SHARD``
    streams (``concurrency``: a closed loop's workers, an open loop's cap on requests in
    flight, which ``streams`` then names in words), at least 1; ``blocked``: what the
    load asks that shards cannot do yet."""
    if blocked is not None:
        return 1, f"auto: 1 shard ({blocked})"
    spare = max(0, cores - 1)
    need = max(1, math.ceil(concurrency / STREAMS_PER_SHARD))
    n = max(1, min(spare, need, MAX_SHARDS))
    what = f"{concurrency} streams" if streams is None else streams
    words = (
        f"auto: {n} shard{'s' if n != 1 else ''} ({spare} spare core"
        f"{'s' if spare != 1 else ''} of {cores}, {what} need{'s' if streams else ''} {need}"
    )
    if server_local:
        words += "; the server is on this host and shares its cores"
    return n, words + ")"


def resolve_auto(cfg: RunConfig, cores: int | None = None) -> None:
    """Set ``cfg.shards`` and ``cfg.shards_auto``'s words for a config that asked for
    ``auto`` (:func:`mark_auto`); nothing for any other."""
    if cfg.shards_auto != AUTO_MARK:
        return
    found = _unsupported(cfg)
    blocked = None if found is None else f"{found[0]} = {found[1]} is {NOT_YET}"
    streams, what = cfg.concurrency, None
    if cfg.arrival != "closed" and blocked is None:
        # An open loop's streams are its requests in flight, at most its cap (its
        # ``concurrency`` only warms connections): never more shards than cap slots.
        if cfg.max_in_flight is not None:
            streams, what = cfg.max_in_flight, f"max_in_flight {cfg.max_in_flight}"
        elif cfg.arrival == "trace" or cfg.rate is None:
            blocked = "a replay's cap is its trace's: give --max-in-flight, or --shards N"
        else:
            streams = default_max_in_flight(cfg.rate)
            what = f"max_in_flight {streams} (the default for {cfg.rate:g} requests/s)"
    n, words = auto_shards(
        streams, usable_cores() if cores is None else cores, is_local(cfg.endpoints),
        blocked, what,
    )  # fmt: skip
    cfg.shards, cfg.shards_auto = n, words


Shards = Annotated[int, Field(ge=1, le=MAX_SHARDS), BeforeValidator(parse_shards)]
"""``RunConfig.shards``: load processes on this host (1: the runner's own loop)."""


def shards_problem(cfg: RunConfig) -> str | None:
    """What the run asks for that ``shards`` N > 1 cannot do yet, in words; None if
    nothing (or no sharding). ``auto`` is resolved first (:func:`resolve_auto`): the
    config's one check of its shards, after the load's own checks."""
    resolve_auto(cfg)
    n = cfg.shards
    if n == 1:
        return None
    found = _unsupported(cfg)
    if found is not None:
        option, words = found
        return (
            f"shards = {n}: {option} = {words} is {NOT_YET} (shards split a steady "
            "closed loop, or an open loop's rate schedule, on one host): drop "
            f"--{option.replace('_', '-')} "
            "or --shards"
        )
    if cfg.arrival != "closed":
        cap = cfg.max_in_flight
        if cap is not None and cap < n:
            return (
                f"shards = {n}: max_in_flight = {cap} gives a shard no request slot; "
                f"ask for at most {cap} shards, or a max_in_flight of {n} or more"
            )
        return None
    if cfg.concurrency < n:
        return (
            f"shards = {n}: concurrency = {cfg.concurrency} gives a shard no worker; "
            f"ask for at most {cfg.concurrency} shards, or a concurrency of {n} or more"
        )
    return None


def _unsupported(cfg: RunConfig) -> tuple[str, str] | None:
    """The first option a sharded run cannot do yet, with its value in words."""
    unsupported = [
        ("matrix", cfg.matrix),
        ("turns", None if cfg.turns == 1 else cfg.turns),
        ("mix", None if cfg.mix is None else "a mixed load"),
        # An open loop's stages and sweep are its rate curve, which every shard draws whole.
        ("stages", cfg.stages if cfg.arrival == "closed" else None),
        ("sweep", cfg.sweep if cfg.arrival == "closed" else None),
    ]
    for option, value in unsupported:
        if value is not None:
            return option, f"{value!r}" if isinstance(value, str) else f"{value}"
    return None
