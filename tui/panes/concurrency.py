"""Pane 4: requested vs started vs in flight, each replica's occupancy and KV, the client.

Client concurrency and the engine's sampled occupancy are different numbers (DESIGN §2):
both are shown, side by side, neither derived from the other. In a soak, the last line is
the runner's leak rates per hour (server RSS, client RSS, KV usage, open files).
"""

from __future__ import annotations

from typing import Any

from textual.content import Content

from soak.record.telemetry import CoverageBySource, EngineView, HealthView
from tui.coverage import lost_entry
from tui.coverage import why as lost_why
from tui.fmt import count, pct, rate, secs
from tui.glyphs import Glyphs
from tui.panes.base import Pane, fit, line, lines, muted
from tui.panes.endurance import leak_line
from tui.panes.open_loop import open_loop_lines
from tui.panes.shard_lines import shard_rows
from tui.runview import RunView

_LOST_STYLE = "bold $text-error"
LEAKS_SHOWN = (
    ("server_rss", "srv"),
    ("client_rss", "cli"),
    ("kv_usage", "KV"),
    ("open_files", "fd"),
)
"""The resources whose leak rate this pane shows (``soak.record.endurance.LEAKS``)."""


def lost_parts(cov: CoverageBySource, endpoint: int | None, whys: bool = True) -> list[Any]:
    """`` metrics LOST (HTTP 404) health LOST (timed out after 0.8 s)`` for a replica
    whose ``/metrics`` or ``/health`` answered under half its samples during the load
    (``whys=False``: without the reasons in brackets, for a narrow pane)."""
    if endpoint is None:
        return []
    parts: list[Any] = []
    for source, word in (("engine_metrics", "metrics"), ("health", "health")):
        entry = lost_entry(cov, source, f"endpoint {endpoint}")
        if entry is not None:
            parts += [" ", (f"{word} LOST", _LOST_STYLE)]
            parts += [muted(f" ({lost_why(entry)})")] if whys else []
    return parts


def replica_line(
    eng: EngineView,
    health: HealthView | None,
    width: int,
    g: Glyphs,
    cov: CoverageBySource | None = None,
) -> Content:
    """``e0 ok  run 16 wait 0 KV ██░░ 1%`` or why the replica has no numbers; a lost
    ``/metrics`` or ``/health`` (``cov``: the snapshot's telemetry.coverage) says so after."""
    ep = eng.endpoint
    who = f"e{ep}" if ep is not None else "e?"
    cov = cov or {}
    lost = lost_parts(cov, ep)
    if not lost:
        return _replica(eng, health, who, width, g)
    metrics_lost = lost_entry(cov, "engine_metrics", f"endpoint {ep or 0}") is not None
    down = health is not None and health.ok is False
    if metrics_lost and (eng.status or "ok") != "ok" and not down:
        # "scrape failed" says less than "metrics LOST (HTTP 404)": the loss stands alone.
        return fit(line((f"{who:<3}", "bold"), *lost[1:]), width, g)
    # The numbers keep the room they need (a 38-column pane: the compact form); the
    # reasons in brackets go first when there is none left for them (4 maximises).
    full = _replica(eng, health, who, max(38, width - _cells(lost)), g).append(line(*lost))
    if full.cell_length > width:
        lost = lost_parts(cov, ep, whys=False)
        full = _replica(eng, health, who, width - _cells(lost), g).append(line(*lost))
    return fit(full, width, g)


def _cells(parts: list[Any]) -> int:
    return line(*parts).cell_length


def _replica(
    eng: EngineView, health: HealthView | None, who: str, width: int, g: Glyphs
) -> Content:
    status = eng.status or "ok"
    state = health.state if health else None
    if health is not None and health.ok is False:
        since = health.down_for_s
        why = f"DOWN {state or 'unhealthy'}" + (f" {since:.0f}s" if since is not None else "")
        extra = "" if status == "ok" else f" ({status})"
        return line((f"{who:<3}", "bold"), (why, "bold $text-error"), muted(extra))
    if status != "ok":
        style = "$text-error" if "fail" in status else "dim"
        return line((f"{who:<3}", "bold"), (status, style))
    kv = eng.kv_usage
    slots = eng.token_slots
    if width < 38:  # a 60-column terminal: no padding, a short bar
        return line(
            (f"{who} ", "bold"),
            muted("run "),
            count(eng.running, g),
            muted(" wait "),
            count(eng.waiting, g),
            muted(" KV "),
            (g.bar(kv, max(3, width - 24)), "$text-accent"),
            f" {pct(kv, g)}",
        )
    bar_w = max(4, min(20, width - 34))
    parts: list[Any] = [
        (f"{who:<3}", "bold"),
        ("ok ", "$text-success"),
        muted("run "),
        f"{count(eng.running, g):>3}",
        muted(" wait "),
        f"{count(eng.waiting, g):>3}",
        muted(" KV "),
        (g.bar(kv, bar_w), "$text-accent"),
        f" {pct(kv, g):>4}",
    ]
    if slots is not None and width >= 48:
        parts.append(muted(f" of {rate(slots, g)} slots"))
    return line(*parts)


class ConcurrencyPane(Pane):
    """Client side first (a sharded run's shards after it), then one line per replica,
    then the client's own health."""

    NUMBER = 4
    TITLE = "concurrency"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        snap = view.snapshot
        load = snap.load if snap else None
        requested = load.requested_concurrency if load else None
        started = load.workers_started if load else None
        short = width < 44
        tight = width < 32
        first = line(
            muted("req " if short else "requested "),
            (count(requested, g), "bold"),
            muted(" start " if tight else "  started "),
            (
                count(started, g),
                "bold $text-error"
                if started is not None
                and requested
                and started < requested
                and (snap.phase if snap else None) not in (None, "identity", "before_gates")
                else "bold",
            ),
            muted(" in flight " if tight else "  in flight "),
            (count(load.in_flight if load else None, g), "bold $text-primary"),
        )
        out: list[Content | str] = [first]
        if snap is not None and snap.open_loop is not None:  # the schedule's figures instead
            out = list(open_loop_lines(snap.open_loop, g, width))
        engines = view.telemetry.engines
        health = {h.endpoint: h for h in view.telemetry.health if h.endpoint is not None}
        cov = view.telemetry.coverage
        leaks = leak_line(view, LEAKS_SHOWN, width)
        if snap is not None and snap.shards:  # a sharded run: its shards before replicas
            spare = height - len(out) - 2 - (leaks is not None)  # a replica, the client
            out += shard_rows(snap.shards, width, spare, g)
        if not engines:
            out.append(line(muted("no engine metrics")))
        room = max(1, height - len(out) - 1 - (leaks is not None))
        for i, eng in enumerate(engines):
            if i == room - 1 and len(engines) > room:
                out.append(line(muted(f"+{len(engines) - i} more replicas (4 to maximise)")))
                break
            hl = health.get(eng.endpoint) if eng.endpoint is not None else None
            out.append(replica_line(eng, hl, width, g, cov))
        if snap is not None and height > len(out):
            client = snap.client
            out.append(
                line(
                    muted("client cpu "),
                    f"{count(client.cpu_percent, g)}%",
                    muted(" lag "),
                    secs(client.loop_lag_s, g),
                    muted(" fd "),
                    f"{count(client.open_files, g)}/{count(client.fd_limit, g)}",
                )
            )
        if leaks is not None:
            out.append(leaks)
        return lines(out[:height])
