"""Whether this host's open-file limit can hold the run's streams, asked before any run.

Every stream is a TCP connection, and a connection is a file descriptor. A shell's soft
limit is usually 1,024 (``ulimit -n``); its hard limit (``ulimit -Hn``) is often 524,288
or more, and any process may raise its soft limit up to its hard one. The load does so
itself (:func:`probes.host.raise_fd_limit`, in the steady load and in each shard: towards
its pooled connections plus 256, a ``warning`` event when it did). Past the hard limit
nothing can be raised: the connections past it fail with "too many open files" (EMFILE),
the workers never reach the barrier, and the run ends INVALID after its whole start-up.

So :func:`fd_problem` refuses such a run before its run directory or any request, when
one process of this host would need more descriptors than the hard limit: its streams
plus :data:`FD_MARGIN`. The words name the option, its value, the limit and the ways out:
more shards (each holds its share) or a higher hard limit. A live raise of the
concurrency past the limit is not refused here (it may never come): its new workers'
connections fail as ``client_error`` ("client-side: too many open files (EMFILE)").
"""

from __future__ import annotations

import math
import resource
from typing import TYPE_CHECKING, Final

from soak.run.steady_load import in_flight_cap

if TYPE_CHECKING:
    from soak.run.config import RunConfig

FD_MARGIN: Final = 128
"""Descriptors a measuring process holds besides its streams: its journals and logs, the
loop's own, pipes to the parser and to shards, telemetry and export sockets, and a
contract gate's connections (at most ``probe_concurrency``, 64). Measured with no gates:
22 beyond the streams in the runner at 64 and at 1,024 streams, 17 in a shard."""


def streams_in_one_process(cfg: RunConfig) -> tuple[int, str]:
    """The most streams one process of this host holds, and the option that sets it in
    words: a closed loop's workers (its peak step's), an open loop's cap on requests in
    flight (:func:`~soak.run.steady_load.in_flight_cap`; a replay's only when given), or
    its warmed connections if more, split evenly over local shards; none here when a Ray
    cluster holds the shards."""
    streams, option = cfg.concurrency, f"concurrency = {cfg.concurrency}"
    # The load's own cap; a replay's default comes from its whole trace, not read twice.
    cap = cfg.max_in_flight if cfg.arrival == "trace" else in_flight_cap(cfg)
    if cap is not None and cap > streams:
        given = "" if cfg.max_in_flight is not None else " (the default for the rate)"
        streams, option = cap, f"max_in_flight = {cap}{given}"
    if cfg.ray is not None:
        return 0, option
    if cfg.shards > 1:
        per = math.ceil(streams / cfg.shards)
        return per, f"{option} over {cfg.shards} shards ({per:,} a shard)"
    return streams, option


def fd_problem(cfg: RunConfig, hard_limit: int | None = None) -> str | None:
    """Why this host's open-file limit cannot hold the run's streams, in words; None
    when it can. ``hard_limit``: the limit to judge (default: this process's hard one,
    what the load may raise its soft one to)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard_limit is None else hard_limit
    if hard == resource.RLIM_INFINITY:
        return None
    streams, option = streams_in_one_process(cfg)
    if streams + FD_MARGIN <= hard:
        return None
    most = max(0, hard - FD_MARGIN)
    total = streams * max(1, cfg.shards)
    shards = math.ceil(total / most) if most else None
    more = f"--shards {shards} (each holds its share), or " if shards and shards > 1 else ""
    return (
        f"{option}: one process would hold {streams:,} connections, and this host lets a "
        f"process open {hard:,} files (ulimit -Hn; {FD_MARGIN} are kept for journals, "
        f"pipes and telemetry): at most {most:,} streams a process. Ask for fewer, or "
        f"{more}raise the hard limit (ulimit -Hn, or LimitNOFILE= in a systemd unit)"
    )
