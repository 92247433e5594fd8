"""Client vs server: do the engine's counter deltas equal what the client received?

For the load window (barrier release → end of drain) the server's request, prompt-token
and generation-token counters must grow by exactly what the client's journal holds —
when every request completed. A difference is reported with both numbers; failed or
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


def reconcile(
    before: list[EngineSample] | None, after: list[EngineSample] | None, load: LoadSummary
) -> dict[str, Any]:
    """The reconciliation section of the record."""
    client = {
        "requests": load.completed,
        "prompt_tokens": load.prompt_tokens,
        "generation_tokens": load.output_tokens,
    }
    base: dict[str, Any] = {"window": "barrier release → end of drain", "client": client}
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
    diffs = {k: server[k] - client[k] for k in client if server[k] != client[k]}
    out = base | {"server": server, "matched": not diffs and not resets, "differences": diffs}
    if resets:
        out["counter_resets"] = resets
    if diffs and (load.failed or load.cancelled):
        out["note"] = (
            f"{load.failed} failed and {load.cancelled} cancelled requests: the "
            "server counted work the client did not receive"
        )
    return out
