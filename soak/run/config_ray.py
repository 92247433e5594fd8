"""``ray`` of :class:`soak.run.config.RunConfig`: the shards on the hosts of a Ray cluster.

``--ray ADDRESS --shards N`` puts each of the N shards on its own node of the cluster at
``ADDRESS`` (:mod:`soak.run.ray_shards`). Checked here, before any run directory exists:
Ray must be installed (the optional extra ``soaktop[distributed]``), and N must be a
number of 2 or more (one shard is the runner's own loop; ``auto`` counts this host's
cores, which says nothing of the cluster's).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from soak.run.config import RunConfig

EXTRA: Final = "pip install 'soaktop[distributed]'"


def ray_problem(cfg: RunConfig) -> str | None:
    """What is wrong with ``ray`` in this config, in words; None if nothing (or unset)."""
    address = cfg.ray
    if address is None:
        return None
    if ":" not in address or not address.rsplit(":", 1)[1].isdigit():
        return (
            f"ray = {address!r}: give the cluster's address as HOST:PORT "
            "(the head node's GCS, e.g. 10.0.0.5:6379)"
        )
    if cfg.shards_auto is not None:
        return (
            f"ray = {address!r} with shards = 'auto': auto counts this host's cores, not "
            "the cluster's nodes; give --shards N (one node per shard)"
        )
    if cfg.shards < 2:
        return (
            f"ray = {address!r} needs --shards 2 or more (one node per shard), "
            f"not shards = {cfg.shards}"
        )
    if importlib.util.find_spec("ray") is None:
        return f"ray = {address!r} needs Ray, which is not installed: {EXTRA}"
    return None
