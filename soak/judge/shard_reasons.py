"""A sharded run's shards judged: a lost shard makes the run INVALID, by name.

A shard that exited before it reported its end (killed, crashed: ``record.shards[i]``
with ``status = lost``) took its workers with it, and the requests it had in flight
never reached the journal: the load the record describes is not the load that was
asked for, so no figure of it can be trusted as the run's (``shard_lost``).

A shard's index is 0-based everywhere (``record.shards[i].index``, the journal's
``shard``, the events): the words add its place, 1-based, so that "shard 1" of two
never reads as the first of them (:func:`shard_name`: ``shard 1 (the 2nd of 2)``).
"""

from __future__ import annotations

from collections.abc import Sequence

from soak.record.models import Reason, ShardInfo


def shard_name(index: int, shards: int) -> str:
    """A shard in words: its 0-based index, as the record keeps it, and its 1-based
    place (``shard 0 (the 1st of 2)``)."""
    place = index + 1
    suffix = "th" if 11 <= place % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(place % 10, "th")
    return f"shard {index} (the {place}{suffix} of {shards})"


def exit_words(code: int | None) -> str:
    """How a lost shard ended: its exit status, or (``None``: no status ever came back,
    a shard on another host) its host lost."""
    return "host lost, no exit status" if code is None else f"exit {code}"


def shard_reasons(shards: Sequence[ShardInfo], max_loop_lag_s: float) -> list[Reason]:
    """One ``shard_lost`` (invalid) per lost shard, naming it, and a
    ``client_overloaded`` per shard whose loop lagged past ``max_loop_lag_s`` (the
    shards stream: the coordinator's own lag says nothing of theirs); none for a
    healthy run."""
    n = len(shards)
    out = [_lagged(s, n, max_loop_lag_s) for s in shards if _over(s, max_loop_lag_s)]
    out += [_mismatch(s, n) for s in shards if _digests_differ(s)]
    for s in shards:
        if s.status != "lost":
            continue
        at = "" if s.lost_at_s is None else f" at {s.lost_at_s:.1f} s"
        flight = (
            "the requests it had in flight"
            if s.in_flight_at_loss is None
            else f"the requests it had in flight ({s.in_flight_at_loss} by its last heartbeat)"
        )
        out.append(
            Reason(
                code="shard_lost",
                effect="invalid",
                message=(
                    f"{shard_name(s.index, n)} lost ({exit_words(s.exit_code)}){at}"
                    + (f" ({s.lost_why})" if s.lost_why else "")
                    + f": its {s.workers} "
                    f"workers stopped and {flight} are not in the journal; the other "
                    f"shards drained, and the record holds the {s.requests} requests it "
                    "finished before"
                ),
            )
        )
    return out


def _over(s: ShardInfo, max_loop_lag_s: float) -> bool:
    return s.loop_lag_p99_s is not None and s.loop_lag_p99_s > max_loop_lag_s


def _lagged(s: ShardInfo, n: int, max_loop_lag_s: float) -> Reason:
    assert s.loop_lag_p99_s is not None
    return Reason(
        code="client_overloaded",
        effect="invalid",
        message=(
            f"{shard_name(s.index, n)}: its event-loop lag p99 {s.loop_lag_p99_s * 1000:.0f} ms "
            f"exceeds {max_loop_lag_s * 1000:.0f} ms: its latencies include the client's "
            "own queueing"
        ),
    )


def _digests_differ(s: ShardInfo) -> bool:
    return bool(s.journal_sha256 and s.received_sha256 and s.journal_sha256 != s.received_sha256)


def _mismatch(s: ShardInfo, n: int) -> Reason:
    """A shard on another host whose journal there is not what the coordinator got."""
    return Reason(
        code="shard_journal_mismatch",
        effect="invalid",
        message=(
            f"{shard_name(s.index, n)}: its journal on {s.host} (sha256 "
            f"{(s.journal_sha256 or '')[:12]}, {s.journal_lines} lines) is not what the "
            f"coordinator received (sha256 {(s.received_sha256 or '')[:12]}, "
            f"{s.received_lines} lines): results were lost or changed on the way"
        ),
    )
