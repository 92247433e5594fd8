"""Did an open-loop load hold its schedule? (issue 16 §1, schedule-relative latency)

An open-loop run measures the server *at a rate*. When the client sent fewer requests
than the schedule offered, sent them late, or held them back under ``--max-in-flight``,
the figures belong to some other, lower and smoother load: the run is INVALID as a
measurement at that rate, with the achieved rate shown (``rate_not_achieved``). A
closed-loop load has no schedule and no such reason.
"""

from __future__ import annotations

from soak.record.models import LoadSummary, Reason

RATE_SHORTFALL = 0.05
"""Achieved below offered by more than this share: the rate was not achieved. Offered is
the drawn schedule's own arrivals in the window (not the nominal ``--rate``, from which a
short Poisson window wanders a few percent), so the share is the client's shortfall
alone; 5% leaves room for the arrivals still due at the window's last instants."""
MAX_LATENESS_P99_S = 0.050
"""Lateness p99 above 50 ms: the client could not send on time. A TTFT is measured in
tens to hundreds of milliseconds; a client late by more than that shifts the arrival
pattern (bursts smoothed, gaps moved) by a good part of what is being measured."""


def rate_reasons(load: LoadSummary | None) -> list[Reason]:
    """``rate_not_achieved`` (invalid) when an open-loop load did not hold its schedule;
    nothing for a closed loop or a load that never started."""
    if load is None or load.offered_rate is None or not load.barrier_released:
        return []
    offered, achieved = load.offered_rate, load.achieved_rate
    why: list[str] = []
    if achieved is None or achieved < offered * (1 - RATE_SHORTFALL):
        why.append(f"the achieved rate is more than {RATE_SHORTFALL:.0%} below the offered one")
    late_p99 = load.lateness_s.p99
    if late_p99 is not None and late_p99 > MAX_LATENESS_P99_S:
        why.append(
            f"sends were late by {late_p99 * 1e3:.1f} ms at p99 "
            f"(bound {MAX_LATENESS_P99_S * 1e3:.0f} ms)"
        )
    if load.held_by_cap:
        why.append(f"{load.held_by_cap} arrivals waited for a slot under --max-in-flight")
    if not why:
        return []
    shown = "no" if achieved is None else f"{achieved:.1f} req/s"
    share = "" if achieved is None or not offered else f" ({achieved / offered:.0%})"
    return [
        Reason(
            code="rate_not_achieved",
            effect="invalid",
            message=(
                f"offered {offered:.1f} req/s, achieved {shown}{share}: the client/cap could "
                f"not hold the schedule ({'; '.join(why)}); not a measurement at that rate"
            ),
        )
    ]
