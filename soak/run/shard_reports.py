"""What the coordinator keeps of each shard's reports (:mod:`soak.run.shards`): its socket
samples into the run's read tally, its loop lag series, and the record's ``shards[]``.

Each runs on the coordinator's loop once per report (about one a second a shard), never
per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loadgen.read_health import ReadTally
from loadgen.stats import summarize
from soak.record.models import ShardInfo
from soak.run.shard_links import ShardLink

__all__ = ["add_lag", "add_reads", "shard_infos"]


def add_reads(tally: ReadTally | None, link: ShardLink, msg: Mapping[str, Any]) -> None:
    """A shard's socket samples since its last report, into the run's read tally (a
    report says its cumulative counts; a malformed one adds nothing)."""
    samples, hits = msg.get("q_samples"), msg.get("q_hits")
    if tally is None or not isinstance(samples, int) or not isinstance(hits, int):
        return
    new_samples, new_hits = samples - link.q_samples, hits - link.q_hits
    if new_samples >= 0 and 0 <= new_hits <= new_samples:
        tally.samples += new_samples
        tally.hits += new_hits
        link.q_samples, link.q_hits = samples, hits


def add_lag(link: ShardLink, msg: Mapping[str, Any]) -> None:
    """A report's loop lag (its interval's worst, while loading) into the shard's series
    (one a second, as the runner keeps its own: :func:`soak.run.finalize.client_health`)."""
    lag = msg.get("lag_s")
    if isinstance(lag, int | float) and not isinstance(lag, bool) and lag >= 0:
        link.lags.append(float(lag))


def shard_infos(
    links: Iterable[ShardLink], released_ns: int | None, redact_host: str = "local"
) -> list[ShardInfo]:
    """Each shard as the record lists it (no pids: they mean nothing after the run);
    ``released_ns``: the coordinator's release, which each shard's offset is from."""
    out = []
    for link in links:
        rep = link.done or link.beat
        ns = link.released_ns
        out.append(
            ShardInfo(
                index=link.index,
                host=redact_host,
                workers=link.workers,
                requests=link.requests,
                release_offset_s=None
                if ns is None or released_ns is None
                else round((int(ns) - released_ns) / 1e9, 6),
                loop_lag_p99_s=summarize(link.lags, "nearest-rank").p99,
                cpu_s=rep.get("cpu_s"),
                status="lost" if link.status == "lost" else "done",
                exit_code=link.exit_code,
                lost_at_s=link.lost_at_s,
                in_flight_at_loss=link.in_flight_at_loss,
            )
        )
    return out
