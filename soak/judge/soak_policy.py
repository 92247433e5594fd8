"""The default soak policy: the drift and leak thresholds a run applies without flags.

``soaktop run --duration 7200`` judges endurance with these unless the run says
``soak_policy = "none"``; a metric the user gave a ``drift.*`` / ``leak.*`` threshold for
takes the user's instead (:func:`policy_for`). Each is checked like any threshold, but a
breach needs a significant trend as well (``soak.judge.trend_metrics``), so noise never
trips one. Fail-tier items FAIL the run; note-tier items (``,note``) add a note.

==========================  ====  ===========================================================
item                        tier  why
==========================  ====  ===========================================================
drift.output_tok_s>-20%     fail  a fifth less throughput at the same load: the server serves
                                  less than it did
drift.ttft.p99<+100%        fail  the tail wait for a first token doubled: what users feel
drift.error_rate<+1%        fail  failures rose by a point (a run with --max-failures above 0
                                  could otherwise pass while the server falls apart)
drift.sanity_rate<+1%       fail  answers turned to garbage with HTTP 200 (a point more of the
                                  responses flagged than at the start)
leak.server_rss<200MB/h     fail  server memory that grows and never comes back runs out
leak.gpu_mem<1GiB/h         fail  GPU memory that grows ends in an out-of-memory error
drift.ttft.p50<+50%         note  the typical wait grew: worth a look, often load-dependent
drift.e2e.p99<+50%          note  end-to-end tails follow output lengths as much as the server
drift.tpot.p50<+25%         note  decode slowed; throughput (fail tier) says whether it matters
drift.itl.p99<+100%         note  inter-token tails are spiky (batch joins, preemptions)
drift.output_len>-30%       note  answers got shorter: collapse, or just a different mix
leak.kv_usage<10%/h         note  KV usage rising at equal load (leaked blocks) shows up as
                                  preemptions and TTFT first; a changing mix moves it too
leak.client_rss<100MB/h     note  soaktop's own memory: a client problem, not the server's
leak.open_files<100/h       note  soaktop's own descriptors, likewise
==========================  ====  ===========================================================

A default item is applied only where it can be checked: a run too short to judge
(``Endurance.judged`` is False) and a figure the run had no source for (no
``--server-pid``, no GPU telemetry, no engine metrics) leave it out, and the record's
``endurance`` says why — so a 30 s demo still passes. A threshold the user gave is held to
"no data is never ok" like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from soak.judge.thresholds import Threshold, ThresholdState, evaluate, parse_threshold
from soak.judge.trend_metrics import is_trend_metric, trend_figures
from soak.record.endurance import Endurance

DEFAULT_POLICY: tuple[str, ...] = (
    "drift.output_tok_s>-20%",
    "drift.ttft.p99<+100%",
    "drift.error_rate<+1%",
    "drift.sanity_rate<+1%",
    "leak.server_rss<200MB/h",
    "leak.gpu_mem<1GiB/h",
    "drift.ttft.p50<+50%,note",
    "drift.e2e.p99<+50%,note",
    "drift.tpot.p50<+25%,note",
    "drift.itl.p99<+100%,note",
    "drift.output_len>-30%,note",
    "leak.kv_usage<10%/h,note",
    "leak.client_rss<100MB/h,note",
    "leak.open_files<100/h,note",
)
"""The default policy's expressions (see the module docstring for why each is there)."""

POLICY_SOURCE = "window series"
"""The ``source`` prefix of the states evaluated against a run's ``endurance``."""


def default_policy() -> list[Threshold]:
    """The default items, parsed (their ``origin`` is ``default``)."""
    return [
        parse_threshold(expr, gpu_telemetry=True).model_copy(update={"origin": "default"})
        for expr in DEFAULT_POLICY
    ]


def policy_for(
    user_thresholds: Sequence[Threshold], source: Literal["default", "none"]
) -> list[Threshold]:
    """The drift and leak thresholds a run applies: the user's own, then (``default``)
    the default items for every metric the user gave none for."""
    given = [t for t in user_thresholds if is_trend_metric(t.metric)]
    if source == "none":
        return given
    named = {t.metric for t in given}
    return given + [t for t in default_policy() if t.metric not in named]


def policy_source(policy: Sequence[Threshold]) -> Literal["default", "given", "none"]:
    """The record's ``policy_source``: ``default`` when a default item is among them."""
    if any(t.origin == "default" for t in policy):
        return "default"
    return "given" if policy else "none"


def defaults_applied(e: Endurance | None, given: Sequence[Threshold]) -> list[Threshold]:
    """The default items ``e`` was judged with: its ``policy`` less the thresholds the
    run was given (those are checked as the run's own)."""
    if e is None or e.policy_source != "default":
        return []
    own = {t.condition for t in given}
    out = []
    for expr in e.policy:
        t = parse_threshold(expr, gpu_telemetry=True)
        if t.condition not in own:
            out.append(t.model_copy(update={"origin": "default"}))
    return out


def policy_states(policy: Sequence[Threshold], e: Endurance | None) -> list[ThresholdState]:
    """Each policy item checked against ``e``'s findings; a default item without data
    (too short a run, no source for the figure) is left out, a given one is no_data."""
    states = evaluate(policy, trend_figures(e), POLICY_SOURCE)
    return [
        s
        for t, s in zip(policy, states, strict=True)
        if not (t.origin == "default" and s.state == "no_data")
    ]
