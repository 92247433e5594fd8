"""Client vs server: do the engine's counter deltas equal what the client received?

For each window — the before-load gates, the load (barrier release → end of drain, canary
probes included) and the after-load gates — the server's request, prompt-token and
generation-token counters must grow by exactly what the client received — when every
request completed. A difference is reported with both numbers; failed or
cancelled requests make an exact match impossible (the server counted work the client
never got to see), and the report says so rather than hiding it.
"""

from __future__ import annotations

from typing import Any

from probes.engine_metrics import EngineSample
from soak.record import LoadSummary

_COUNTERS = {
    "requests": "requests_finished_total",
    "prompt_tokens": "prompt_tokens_total",
    "generation_tokens": "generation_tokens_total",
}
_NOT_COMPLETED = ("abort", "error")


def _delta(before: float, after: float) -> tuple[float, bool]:
    """Counter growth; a counter that went down was reset (a server restart)."""
    return (after, True) if after < before else (after - before, False)


def reconcile_window(
    before: list[EngineSample] | None,
    after: list[EngineSample] | None,
    client: dict[str, int],
    window: str,
    unfinished: int = 0,
) -> dict[str, Any]:
    """One window's reconciliation: ``client`` holds requests, prompt_tokens and
    generation_tokens the client received complete; ``unfinished`` counts requests that
    failed or were cut (the server may have counted work the client never saw)."""
    base: dict[str, Any] = {"window": window, "client": client}
    if not before or not after or len(before) != len(after):
        return base | {"matched": None, "unavailable": "no counter snapshots were taken"}
    broken = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b.error or a.error]
    if broken:
        return base | {"matched": None, "unavailable": f"/metrics failed on endpoint(s) {broken}"}
    server: dict[str, float] = {}
    resets: list[str] = []
    missing: list[str] = []
    for name, key in _COUNTERS.items():
        total = 0.0
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            vb, va = b.values.get(key), a.values.get(key)
            if vb is None or va is None:
                missing.append(name)
                break
            d, reset = _delta(vb, va)
            if reset:
                resets.append(f"{key} on endpoint {i}")
            if name == "requests":  # only requests that finished normally on the server
                for reason in _NOT_COMPLETED:
                    fb = b.finished_by_reason.get(reason, 0.0)
                    d -= _delta(fb, a.finished_by_reason.get(reason, 0.0))[0]
            total += d
        server[name] = total
    if missing:
        return base | {
            "matched": None,
            "unavailable": f"the engine exports no counter for {sorted(set(missing))}",
        }
    diffs = {k: server[k] - client[k] for k in _COUNTERS if server[k] != client.get(k, 0)}
    out = base | {"server": server, "matched": not diffs and not resets, "differences": diffs}
    if resets:
        out["counter_resets"] = resets
    if diffs and unfinished:
        out["note"] = (
            f"{unfinished} failed or cut requests: the server counted work the client did "
            "not receive"
        )
    return out


def reconcile(
    before: list[EngineSample] | None,
    after: list[EngineSample] | None,
    load: LoadSummary,
    canary: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The load window (barrier release → end of drain); canary probes ran inside it, so
    their requests and tokens count on the client side too."""
    client = {
        "requests": load.completed,
        "prompt_tokens": load.prompt_tokens,
        "generation_tokens": load.output_tokens,
    }
    unfinished = load.failed + load.cancelled
    if canary:
        client["requests"] += canary["completed"]
        client["prompt_tokens"] += canary["prompt_tokens"]
        client["generation_tokens"] += canary["completion_tokens"]
        unfinished += canary["requests"] - canary["completed"]
    out = reconcile_window(before, after, client, "barrier release → end of drain", unfinished)
    if canary:
        out["includes_canary_requests"] = canary["requests"]
    return out


def reconcile_gates(
    before: list[EngineSample] | None, after: list[EngineSample] | None, acc: dict[str, int]
) -> dict[str, Any]:
    """One gate phase: the probes' own requests and tokens against the counters."""
    client = {
        "requests": acc["completed"],
        "prompt_tokens": acc["prompt_tokens"],
        "generation_tokens": acc["completion_tokens"],
    }
    return reconcile_window(
        before, after, client, "gate phase start → end", acc["requests"] - acc["completed"]
    )


def overall(windows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"matched": ..., <phase>: {...}}``: matched only when every window with counters
    matched; None when no window could be reconciled."""
    states = [w.get("matched") for w in windows.values()]
    known = [m for m in states if m is not None]
    matched = None if not known else all(known)
    return {"matched": matched} | windows
