"""Client vs server: do the engine's counter deltas equal what the client received?

For each window — the before-load gates, the load (barrier release → end of drain, canary
probes included) and the after-load gates — the server's request, prompt-token and
generation-token counters must grow by exactly what the client received — when every
request completed. A difference is reported with both numbers; failed or
cancelled requests make an exact match impossible (the server counted work the client
never got to see), and the report says so rather than hiding it. A server that restarted
inside a window (``soak.watch.engine`` saw its counters go down) lost its counts from
before the restart: that window's counters are ``unavailable``, with the restart's time,
never a "mismatch" (and a gap where the server counted *less* than the client received
is never blamed on failed requests, which can only make it count more).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from probes.engine_metrics import EngineSample
from soak.record.faults import when
from soak.record.models import LoadSummary, Reason

Restarts = Sequence[Sequence[dict[str, Any]]]
"""Per endpoint, the restarts seen (``EngineWatch.restarts``: ``{"t": seconds since the
origin, "counters": [...]}``)."""

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
    restarts: Restarts | None = None,
    load_start_s: float | None = None,
) -> dict[str, Any]:
    """One window's reconciliation: ``client`` holds requests, prompt_tokens and
    generation_tokens the client received complete; ``unfinished`` counts requests that
    failed or were cut (the server may have counted work the client never saw);
    ``restarts`` per endpoint, with ``load_start_s`` to say their times in words.

    Each counter gets ``{status, client, server, difference}`` with status ``matched``,
    ``mismatched`` (difference = server - client) or ``unavailable`` (with ``why``). The
    window's ``matched`` is True when all three matched, False when any mismatched, None
    when none mismatched but some could not be compared."""
    base: dict[str, Any] = {"window": window}
    if not before or not after or len(before) != len(after):
        return _unavailable(base, client, "no counter snapshots were taken")
    broken = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b.error or a.error]
    if broken:
        # what failed, by kind only ("HTTP 404", "timed out after 2 s", "ConnectError"):
        # an exception's own words may name hosts and ports
        errors = {
            f"endpoint {i} {edge}": s.error.split(":", 1)[0][:80]
            for i in broken
            for edge, s in (("start", before[i]), ("end", after[i]))
            if s.error
        }
        why = f"/metrics failed on endpoint(s) {broken}"
        return _unavailable(base, client, why) | {"errors": errors}
    inside = [
        (i, float(r["t"]))
        for i, (b, a) in enumerate(zip(before, after, strict=True))
        for r in (restarts[i] if restarts is not None and i < len(restarts) else [])
        if b.t < float(r["t"]) <= a.t
    ]
    if inside:
        # The counts from before the restart are gone, whether or not they grew back past
        # the window's first sample by its end: nothing here can be compared.
        words = ", ".join(dict.fromkeys(f"endpoint {i} {when(t, load_start_s)}" for i, t in inside))
        why = f"the server restarted in the window ({words}): its counters began again"
        out = _unavailable(base, client, why)
        out["counter_resets"] = [
            {"endpoint": i, "t_s": round(t, 3), "at": when(t, load_start_s)} for i, t in inside
        ]
        out["unfinished"] = unfinished
        return out
    out, resets = _compare_counters(base, before, after, client, load_start_s)
    states = [out[n]["status"] for n in _COUNTERS]
    out["matched"] = (
        False if "mismatched" in states else True if set(states) == {"matched"} else None
    )
    if resets:
        out["counter_resets"] = resets
    if note := _gap_note(out, unfinished):
        out["note"] = note
    out["unfinished"] = unfinished
    return out


def _unavailable(base: dict[str, Any], client: dict[str, int], why: str) -> dict[str, Any]:
    """A window none of whose counters could be compared, and why."""
    per = {n: _counter("unavailable", client.get(n, 0), None, why) for n in _COUNTERS}
    return base | {"matched": None, "unavailable": why} | per


def _compare_counters(
    base: dict[str, Any],
    before: list[EngineSample],
    after: list[EngineSample],
    client: dict[str, int],
    load_start_s: float | None,
) -> tuple[dict[str, Any], list[str]]:
    """Each counter's growth over the window, summed over the endpoints, against what
    the client received; and the counters that went down (a restart between scrapes)."""
    out = dict(base)
    resets: list[str] = []
    for name, key in _COUNTERS.items():
        total, why = 0.0, None
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            vb, va = b.values.get(key), a.values.get(key)
            if vb is None or va is None:
                why = f"endpoint {i} ({a.engine or 'unknown engine'}) exports no {key}"
                break
            d, reset = _delta(vb, va)
            if reset:
                resets.append(f"{key} on endpoint {i}")
                why = (
                    f"{key} went down on endpoint {i} between {when(b.t, load_start_s)[3:]} "
                    f"and {when(a.t, load_start_s)[3:]}: the server restarted in the window"
                )
            if name == "requests":  # only requests that finished normally on the server
                for reason in _NOT_COMPLETED:
                    fb = b.finished_by_reason.get(reason, 0.0)
                    d -= _delta(fb, a.finished_by_reason.get(reason, 0.0))[0]
            total += d
        mine = client.get(name, 0)
        if why is not None:
            out[name] = _counter("unavailable", mine, None if "exports no" in why else total, why)
        else:
            out[name] = _counter("matched" if total == mine else "mismatched", mine, total)
    return out, resets


def _gap_note(out: dict[str, Any], unfinished: int) -> str | None:
    """What explains a mismatch, or says it cannot be explained."""
    short = [
        n.replace("_", " ")
        for n in _COUNTERS
        if out[n]["status"] == "mismatched" and out[n]["difference"] < 0
    ]
    if short:
        # Failed or cut requests only ever make the server count more than the client got.
        return (
            f"the server counted less than the client received ({', '.join(short)}): its "
            "counters missed work (a restart between two scrapes, or counters published late)"
        )
    if out.get("matched") is False and unfinished:
        return (
            f"{unfinished} failed or cut requests: the server counted work the client did "
            "not receive"
        )
    return None


def _counter(
    status: str, client: int, server: float | None, why: str | None = None
) -> dict[str, Any]:
    """One counter's comparison, with both numbers and how far apart they are."""
    item: dict[str, Any] = {"status": status, "client": client, "server": server}
    if server is not None:
        item["difference"] = server - client
        if status == "mismatched" and client:
            item["difference_pct"] = round(100 * (server - client) / client, 3)
    if why is not None:
        item["why"] = why
    return item


def mismatches(reconciliation: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(window, counter, comparison) for every mismatched counter of a record's
    reconciliation, in window order."""
    out = []
    for window, res in reconciliation.items():
        if not isinstance(res, dict):
            continue
        for name in _COUNTERS:
            item = res.get(name)
            if isinstance(item, dict) and item.get("status") == "mismatched":
                out.append((window, name, item))
    return out


def reconcile(
    before: list[EngineSample] | None,
    after: list[EngineSample] | None,
    load: LoadSummary,
    canary: dict[str, int] | None = None,
    restarts: Restarts | None = None,
    load_start_s: float | None = None,
    warmup: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The load window (barrier release → end of drain); canary probes and the soak
    warm-up's requests ran inside it, so their requests and tokens count on the client
    side too (``canary``, ``warmup``: requests, completed, prompt and completion tokens)."""
    client = {
        "requests": load.completed,
        "prompt_tokens": load.prompt_tokens,
        "generation_tokens": load.output_tokens,
    }
    unfinished = load.failed + load.cancelled
    for extra in (canary, warmup):
        if extra:
            client["requests"] += extra["completed"]
            client["prompt_tokens"] += extra["prompt_tokens"]
            client["generation_tokens"] += extra["completion_tokens"]
            unfinished += extra["requests"] - extra["completed"]
    out = reconcile_window(
        before, after, client, "barrier release → end of drain", unfinished, restarts, load_start_s
    )
    if canary:
        out["includes_canary_requests"] = canary["requests"]
    if warmup:
        out["includes_warmup_requests"] = warmup["requests"]
    return out


def reconcile_gates(
    before: list[EngineSample] | None,
    after: list[EngineSample] | None,
    acc: dict[str, int],
    restarts: Restarts | None = None,
    load_start_s: float | None = None,
) -> dict[str, Any]:
    """One gate phase: the probes' own requests and tokens against the counters."""
    client = {
        "requests": acc["completed"],
        "prompt_tokens": acc["prompt_tokens"],
        "generation_tokens": acc["completion_tokens"],
    }
    unfinished = acc["requests"] - acc["completed"]
    return reconcile_window(
        before, after, client, "gate phase start → end", unfinished, restarts, load_start_s
    )


def overall(windows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"matched": ..., <phase>: {...}}``: matched only when every window with counters
    matched; None when no window could be reconciled."""
    states = [w.get("matched") for w in windows.values()]
    known = [m for m in states if m is not None]
    matched = None if not known else all(known)
    return {"matched": matched} | windows


_WINDOW_WORDS = {"before": "before-load gates", "load": "load", "after": "after-load gates"}


def reconcile_reasons(reconciliation: dict[str, Any], strict: bool) -> list[Reason]:
    """One reason per window whose counters disagree: a note, or with ``strict`` INVALID
    when no failed or cut request explains the gap (with failures the verdict already
    says FAILED, and the gap is expected)."""
    out: list[Reason] = []
    for window in ("before", "load", "after"):
        res = reconciliation.get(window)
        if not isinstance(res, dict) or res.get("matched") is not False:
            continue
        gaps = [
            f"{name.replace('_', ' ')}: server {item['server']:,.0f}, client {item['client']:,}"
            f" ({item['difference']:+,.0f})"
            for w, name, item in mismatches({window: res})
            if w == window
        ]
        # Failed or cut requests explain a server that counted more, never one that
        # counted less than the client received.
        counted_less = any(
            item["difference"] < 0 for w, _, item in mismatches({window: res}) if w == window
        )
        explained = bool(res.get("unfinished")) and not counted_less
        out.append(
            Reason(
                code="reconcile_mismatch",
                effect="invalid" if strict and not explained else "note",
                message=f"{_WINDOW_WORDS[window]}: the server's counters disagree with what "
                f"the client received ({'; '.join(gaps)})"
                + (f"; {res['note']}" if res.get("note") else ""),
            )
        )
    return out
