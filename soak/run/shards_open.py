"""``--shards N`` with an open loop: one arrival schedule, split by arrival index.

Every shard draws the run's whole schedule — the same arrival model, seed, burstiness
and rate curve — and sends only the arrivals ``g`` with ``g % N == k``
(:class:`soak.run.shard_main.ShardOpenLoop`), each at its intended instant from one
origin: the coordinator's release, ``t0``, which the ``release`` line carries (on one
host one monotonic clock; elsewhere shifted by the link's clock offset). So the merged
journal holds the arrivals, intended instants, request numbers and prompts one process
would send, and the record's offered and achieved rates and lateness, computed from it,
are one process's figures for the same run. (Two differences a reader may notice:
after an operator's pause a request's number is its arrival's, so the numbers skip the
withheld arrivals where one process numbers what it sent in a row — the prompts are the
same, and nothing reads the numbers but people; and the cap is split, so a shard can
hold an arrival while another shard has a slot free: ``held_by_cap`` counts what the
shards held, which near the cap is more than one process's would.)

A trace replay splits the same way: each shard gets the calibrated trace pool whole
(:mod:`soak.run.shard_trace`), sends its share of the lines at the trace's times, and
ends its window after its last one.

The coordinator is an :class:`~loadgen.open_loop.OpenLoopGenerator` to the rest of the
runner (the snapshot's open-loop line, the record's offered rate, the steps) whose
scheduler never runs: it keeps the run's rate curve (every live change, set to hold
from an instant a little ahead, ``RATE_LEAD_S``, and sent with that instant, so every
shard's curve is the same and each re-times the same arrivals) and the operator's
pauses, and sums the shards' counts. ``--max-in-flight`` splits as
:func:`~soak.run.shard_protocol.share`; ``held_by_cap`` is the shards' sum, and
``in_flight_peak`` the merged requests' own (:mod:`soak.run.shard_peak`), not the sum of
the shards' peaks, which only bounds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from loadgen.arrivals import RateCurve
from loadgen.envelope import RequestResult
from loadgen.headers import secret_vars
from loadgen.open_loop import OpenLoopGenerator, OpenLoopState
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.tls import TlsFiles
from loadgen.trace_source import TracePool
from loadgen.workers import LoadPlan, StreamingClient
from soak.run.config import RunConfig
from soak.run.request_sink import RequestSink
from soak.run.shard_links import ShardLauncher, ShardLink, local_launcher
from soak.run.shard_peak import MergedPeak
from soak.run.shard_protocol import share
from soak.run.shard_trace import trace_spec
from soak.run.shards import ShardedGenerator

RATE_LEAD_S: Final = 0.05
"""How far ahead of its making a live rate change holds: more than a pipe's delay on a
busy host, so every shard has it before its instant (one reaching a shard later still
holds from that instant; the arrivals it sent meanwhile keep the old rate's times)."""


class ShardedOpenLoop(ShardedGenerator, OpenLoopGenerator):
    """The open loop over N shard processes (see the module's docstring): a schedule's
    ``max_in_flight`` (the run's cap, split by :func:`share`) and ``points`` (its rate
    curve's), its ``model``, ``burstiness`` and ``seed``."""

    state: OpenLoopState

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        sink: RequestSink,
        shards: int,
        client_spec: Mapping[str, Any],
        schedule: Mapping[str, Any],
        launcher: ShardLauncher = local_launcher,
        secret_vars: Iterable[str] = (),
    ) -> None:
        curve = (
            None  # a replay's times are the trace's
            if "replay" in schedule
            else RateCurve([(float(t), float(r)) for t, r in schedule["points"]])
        )
        super().__init__(
            plan, client, pool, bodies, sink, shards, client_spec, launcher, secret_vars,
            offsets=iter(()), max_in_flight=int(schedule["max_in_flight"]), curve=curve,
        )  # fmt: skip
        self._schedule = dict(schedule)
        self._changes: list[tuple[float, float]] = []
        """The live rate changes so far, ``(at_s, rate)``: a shard started after one
        replays them onto its curve."""
        self._peak = MergedPeak()
        """The merged requests' in-flight peak (the snapshot's ``in_flight_peak``)."""

    def _spec_fields(self, link: ShardLink) -> dict[str, Any]:
        fields = super()._spec_fields(link)
        plan = self.plan
        fields["plan"].update(
            # Each request's endpoint is its run number's (the shard numbers them so).
            endpoints=list(plan.endpoints),
            # The shard's schedule stops at the window's end as one process's does (the
            # coordinator's stop comes a pipe's delay later).
            duration_s=plan.duration_s,
        )
        fields["schedule"] = {**self._schedule, "changes": list(self._changes)}
        return fields

    def _result_sink(self) -> Callable[..., None]:
        journal, starts, ends = self._sink.on_result, self._peak.starts, self._peak.ends

        def on_result(r: RequestResult, shard: int | None = None) -> None:
            if r.end_ns is not None:  # MergedPeak.add, inline: this runs per request
                starts.append(r.sent_ns)
                ends.append(r.end_ns)
            journal(r, shard=shard)

        return on_result

    def _merge_counts(self) -> None:
        super()._merge_counts()
        gs, links = self.state, self.links
        gs.held_by_cap = sum(int(lk.beat.get("held_by_cap", 0)) for lk in links)
        gs.skipped_paused = sum(int(lk.beat.get("skipped_paused", 0)) for lk in links)
        # The merged requests' peak (the shards' peaks' sum is only a bound on it).
        marks = [self._settled_ns(lk) for lk in links]
        if None not in marks:
            gs.in_flight_peak = self._peak.settle(min(m for m in marks if m is not None))

    @staticmethod
    def _settled_ns(link: ShardLink) -> float | None:
        """Before when every request of this shard is journaled (None: not known yet)."""
        if link.done is not None or link.status == "lost":
            return math.inf  # all it sent is in (a lost shard's unsent lines never come)
        return link.reported_ns(link.beat.get("settled_ns"))

    def set_rate(self, rate: float, at_s: float | None = None) -> None:
        """Hold ``rate`` from :data:`RATE_LEAD_S` from now on, in every shard: the change
        is made at one instant of the schedule (seconds from the origin), a little ahead,
        so it reaches every shard before it holds and each re-times the same arrivals —
        the merged schedule is one process's with the change at that instant."""
        released = self.state.barrier_released_ns is not None
        at = (self._now_s() + RATE_LEAD_S if released else 0.0) if at_s is None else at_s
        OpenLoopGenerator.set_rate(self, rate, at_s=at)
        self._changes.append((at, rate))
        self._send_all("rate", rate=rate, at_s=at)

    def set_concurrency(self, n: int) -> None:
        """Refused, as one process's open loop refuses it: its load is its rate."""
        OpenLoopGenerator.set_concurrency(self, n)

    @property
    def max_concurrency(self) -> int | None:
        """None: an open loop has no workers to raise."""
        return None


def sharded_open_loop(
    cfg: RunConfig,
    plan: LoadPlan,
    client: StreamingClient,
    pool: PromptPool,
    bodies: BodyBuilder,
    sink: RequestSink,
    headers: Mapping[str, str],
) -> ShardedOpenLoop:
    """The coordinator's open loop for ``cfg.shards`` shards (a rate-driven arrival
    model — ``constant``, ``poisson``, ``gamma`` — or a trace's replay), its schedule
    exactly what :func:`soak.run.steady_load.make_generator` would give one process."""
    from soak.run.load_steps import step_curve
    from soak.run.steady_load import arrival_seed, in_flight_cap

    cap = in_flight_cap(cfg)
    assert cap is not None
    schedule: dict[str, Any]
    if cfg.arrival == "trace":
        assert isinstance(pool, TracePool), "a replay's pool is its calibrated trace"
        schedule = {"replay": trace_spec(pool), "max_in_flight": cap}
    else:
        assert cfg.arrival in ("constant", "poisson", "gamma") and cfg.rate is not None
        curve = step_curve(cfg) or RateCurve(points=[(0.0, cfg.rate)])
        schedule = {
            "model": cfg.arrival,
            "burstiness": cfg.burstiness,
            "seed": arrival_seed(cfg),
            "points": curve.points,
            "max_in_flight": cap,
        }
    client_spec = {
        "max_connections": share(cap, cfg.shards, 0) + 16,
        "connect_timeout_s": cfg.connect_timeout_s,
        "read_timeout_s": cfg.read_timeout_s,
        "headers": dict(headers),
        "tls": TlsFiles.of(cfg).spec(),  # paths only: each shard reads the files
        "sanity_checks": cfg.sanity_checks,
        "ignore_eos": cfg.ignore_eos,
    }
    return ShardedOpenLoop(
        plan, client, pool, bodies, sink, cfg.shards, client_spec, schedule,
        secret_vars=secret_vars(cfg.headers, cfg.api_key_env),
    )  # fmt: skip


__all__ = ["ShardedOpenLoop", "sharded_open_loop"]
