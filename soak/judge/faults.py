"""The fault reasons: server-log faults, /health outages, server restarts and GPU faults.

Server-log faults, /health and restarts are judged from the record-shaped telemetry
summaries (``telemetry.server_logs``, ``telemetry.health``, ``telemetry.engines``): the
runner's watchers write them for finalize; for a runner that died without a record,
:func:`telemetry_from_journals` rebuilds what the journals hold of them (``events.jsonl``
and the last snapshot), so ``soaktop recover`` reaches the same reasons.

GPU faults (``gpu_fault``) are judged from the ``fault`` events the GPU sources wrote
(``soak.watch.gpu.ledger``): each carries its verdict words and effect, so finalize,
recover and verify all read the same lines of ``events.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from soak.judge.limits import CLIENT_OVERLOAD_S
from soak.record.faults import when
from soak.record.models import Reason

GPU_SOURCES = ("nvml", "dcgm")
"""The GPU sources, in the order the runner starts them (their reasons come in this order)."""
MAX_GPU_REASONS = 50
"""At most this many fault reasons per GPU source reach the verdict; one more per effect
says how many were left out."""

_Effect = Literal["failed", "note"]


def fault_reasons(
    telemetry: Mapping[str, Any],
    load_start_s: float | None = None,
    client_overload_s: float = CLIENT_OVERLOAD_S,
) -> list[Reason]:
    """Critical server-log faults and /health outages fail the run; other fault lines
    (a traceback the server survived) are notes. Times are relative to the load's start.
    /health checks the client could not send are the client's (``health_client_error``):
    a note, INVALID when they went on for ``client_overload_s``."""
    out: list[Reason] = []
    for src in telemetry.get("server_logs") or []:
        for kind, first in (src.get("first") or {}).items():
            n = (src.get("faults") or {}).get(kind, 1)
            more = f" (+{n - 1} more)" if n > 1 else ""
            critical = first["severity"] == "critical"
            out.append(
                Reason(
                    code="server_fault" if critical else "server_log_error",
                    effect="failed" if critical else "note",
                    message=f"{src['source']}: {first['summary']} "
                    f"{when(first['t_s'], load_start_s)}{more}: {first['line'][:160]}",
                )
            )
    for h in telemetry.get("health") or []:
        if h.get("client_errors"):
            out.append(_client_error_reason(h, client_overload_s))
        if h.get("failures"):
            out.append(_health_reason(h))
    return out


def _health_reason(h: Mapping[str, Any]) -> Reason:
    """An endpoint whose /health failed: an outage fails the run; a /health slower than
    its timeout (0.8 × the interval, at most 5 s) is an overloaded API server, not a dead
    one: a note. Rebuilt from the journals, the count of checks is unknown (None) and
    so are the counts per kind."""
    kinds: Mapping[str, int | None] = h.get("failures_by_kind") or {}
    slow_only = set(kinds) == {"timeout"}
    by = ", ".join(f"{n}× {k}" if n is not None else k for k, n in kinds.items())
    checks = h.get("checks")
    of = f" of {checks}" if checks is not None else ""
    return Reason(
        code="health_slow" if slow_only else "health_outage",
        effect="note" if slow_only else "failed",
        message=f"endpoint {h['endpoint']} /health failed {h['failures']}{of} checks "
        f"({by}; longest outage {h.get('longest_outage_s') or 0:.1f} s)",
    )


def _client_error_reason(h: Mapping[str, Any], client_overload_s: float) -> Reason:
    """The client ran out of sockets (file descriptors, ports) checking /health: its own
    health, never the server's; sustained, the run's measurements cannot be trusted."""
    kinds = h["client_errors"]
    n = sum(kinds.values())
    longest = float(h.get("client_errors_longest_s") or 0.0)
    sustained = longest >= client_overload_s
    by = ", ".join(f"{k} {c}×" for k, c in kinds.items())
    tail = (
        f" for {longest:.0f} s (limit {client_overload_s:g} s): the client was out of "
        "resources, so its measurements cannot be trusted"
        if sustained
        else " (the client's own failure, not the server's)"
    )
    return Reason(
        code="health_client_error",
        effect="invalid" if sustained else "note",
        message=f"endpoint {h['endpoint']} /health: soaktop could not send {n} checks "
        f"({by}){tail}; raise the open-files limit (ulimit -n)",
    )


def restart_reasons(
    telemetry: Mapping[str, Any], load_start_s: float | None = None
) -> list[Reason]:
    """A server that restarted during the run FAILS it: its counters began again, and
    everything in flight at the time was lost. Derived from ``telemetry.engines``."""
    out: list[Reason] = []
    for eng in telemetry.get("engines") or []:
        restarts = eng.get("restarts") or []
        if restarts:
            # Restarts inside one second read the same: say each time once.
            times = ", ".join(dict.fromkeys(when(r["t"], load_start_s) for r in restarts))
            n = f" {len(restarts)} times" if len(restarts) > 1 else ""
            out.append(
                Reason(
                    code="server_restart",
                    effect="failed",
                    message=f"endpoint {eng['endpoint']} restarted{n} during the run (its "
                    f"counters went down {times})",
                )
            )
    return out


# --- GPU faults, from events.jsonl ---------------------------------------------------------


def gpu_fault_events(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The GPU sources' ``fault`` events among a run's events."""
    return [
        ev
        for ev in events
        if ev.get("kind") == "fault" and (ev.get("data") or {}).get("source") in GPU_SOURCES
    ]


def gpu_faults_judgeable(events: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every GPU fault event carries its verdict words (soaktop 0.x before the
    one verdict path wrote only the event's message: its ``gpu_fault`` reasons cannot be
    rebuilt word for word)."""
    return all("reason" in ev["data"] for ev in gpu_fault_events(events))


def gpu_fault_reasons(events: Iterable[Mapping[str, Any]]) -> list[Reason]:
    """One ``gpu_fault`` reason per GPU fault event: ``failed`` for an Xid, a lost GPU,
    ECC or row-remapping fault during the run, ``note`` for one there before the first
    read or waived by ``--ignore-xid``; per source at most ``MAX_GPU_REASONS``, then one
    per effect saying how many were left out. An event without verdict words (an older
    writer) is judged by its severity, with its message."""
    kept: dict[str, list[Reason]] = {s: [] for s in GPU_SOURCES}
    dropped: dict[str, dict[_Effect, int]] = {s: {"failed": 0, "note": 0} for s in GPU_SOURCES}
    for ev in gpu_fault_events(events):
        data = ev["data"]
        effect: _Effect = data.get("effect") or (
            "failed" if ev.get("severity") == "critical" else "note"
        )
        source = data["source"]
        if len(kept[source]) < MAX_GPU_REASONS:
            message = str(data.get("reason") or ev.get("message") or "")
            kept[source].append(Reason(code="gpu_fault", effect=effect, message=message))
        else:
            dropped[source][effect] += 1
    out: list[Reason] = []
    for source in GPU_SOURCES:
        out += kept[source]
        out += [
            Reason(
                code="gpu_fault",
                effect=effect,
                message=f"{n} more GPU fault(s) not listed (see events.jsonl)",
            )
            for effect, n in dropped[source].items()
            if n
        ]
    return out


# --- the fault telemetry the journals hold ----------------------------------------------------


def telemetry_from_journals(
    events: Iterable[Mapping[str, Any]], last_snapshot: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``server_logs``, ``health`` and ``engines`` (restarts) as the journals hold them,
    for a run whose runner died before its watchers summed up.

    Server-log faults: the first event of each kind per log (the watcher writes the first
    few of each), counted up to what the last snapshot counted. Restarts: every restart
    event. /health: the outages the events name, their kinds (not counted per check), the
    failed checks the last snapshot counted and the longest outage seen; the number of
    checks is not journaled (None)."""
    logs: dict[str, dict[str, Any]] = {}
    restarts: dict[int, list[dict[str, Any]]] = {}
    health: dict[int, dict[str, Any]] = {}
    for ev in events:
        kind, data = ev.get("kind"), ev.get("data") or {}
        if kind == "fault" and "line" in data and data.get("fault"):
            _log_fault(logs, ev, data)
        elif kind == "restart" and data.get("endpoint") is not None:
            t = float(data.get("t_s", ev["t"]))
            restarts.setdefault(int(data["endpoint"]), []).append({"t": t})
        elif kind == "health" and data.get("endpoint") is not None:
            _health_event(health, ev, data)
    telemetry = (last_snapshot or {}).get("telemetry") or {}
    for view in telemetry.get("server_logs") or []:
        src = logs.get(view.get("source"))
        if src is not None:
            for k, n in (view.get("faults") or {}).items():
                src["faults"][k] = max(src["faults"].get(k, 0), int(n))
    for view in telemetry.get("health") or []:
        h = health.get(view.get("endpoint"))
        if h is not None:
            h["failures"] = max(h["failures"], int(view.get("failures") or 0))
            current = float(view.get("down_for_s") or 0.0)
            h["longest_outage_s"] = max(h["longest_outage_s"], current)
    out: dict[str, Any] = {}
    if logs:
        out["server_logs"] = list(logs.values())
    if health:
        out["health"] = [health[i] for i in sorted(health)]
    if restarts:
        out["engines"] = [{"endpoint": i, "restarts": restarts[i]} for i in sorted(restarts)]
    return out


def _log_fault(
    logs: dict[str, dict[str, Any]], ev: Mapping[str, Any], data: Mapping[str, Any]
) -> None:
    """One fault line's event (``"<log>: <summary>"``, the line in ``data.line``)."""
    label, _, summary = str(ev.get("message", "")).partition(": ")
    src = logs.setdefault(
        label, {"source": label, "replica": data.get("replica"), "faults": {}, "first": {}}
    )
    kind = str(data["fault"])
    src["faults"][kind] = src["faults"].get(kind, 0) + 1
    src["first"].setdefault(
        kind,
        {
            "t_s": round(float(ev["t"]), 3),
            "severity": ev.get("severity"),
            "summary": summary,
            "line": str(data["line"]),
        },
    )


def _health_event(
    health: dict[int, dict[str, Any]], ev: Mapping[str, Any], data: Mapping[str, Any]
) -> None:
    """A /health change: an outage begins or changes kind (error), or ends (info)."""
    i = int(data["endpoint"])
    down = ev.get("severity") in ("error", "critical")
    if not down and i not in health:
        return  # a recovery of an outage nobody saw begin says nothing here
    h = health.setdefault(
        i,
        {
            "endpoint": i,
            "checks": None,
            "failures": 0,
            "failures_by_kind": {},
            "longest_outage_s": 0.0,
        },
    )
    if down:
        h["failures"] += 1  # at least the check that changed the state
        h["failures_by_kind"].setdefault(str(data.get("state") or "failed"), None)
    if data.get("down_for_s") is not None:
        h["longest_outage_s"] = max(h["longest_outage_s"], float(data["down_for_s"]))
