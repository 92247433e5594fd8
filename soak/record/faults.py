"""The record's ``faults[]``: every fault of the run on one timeline, relative to the load.

Built from ``events.jsonl`` (fault, restart and health-down events, whichever source
raised them), so ``soaktop verify`` recomputes it from the same journal. Times are given
relative to the barrier release (``load+00:17:02``): the question an on-call engineer asks
is "how far into the load did this happen", next to the requests it broke.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from soak.record.matrix import MatrixSummary
from soak.record.models import LoadSummary


def when(t_s: float, load_start_s: float | None) -> str:
    """``load+00:17:02`` (or ``load-00:00:04``, 4 s before the release); without a load,
    the time since the run began: ``at 16.3 s``. Within half a second of the release it is
    ``load+00:00:00``, never a ``load-00:00:00`` that reads as "before"."""
    if load_start_s is None:
        return f"at {t_s:.1f} s"
    rel = t_s - load_start_s
    s = round(abs(rel))
    sign = "-" if rel < 0 and s > 0 else "+"
    return f"at load{sign}{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def load_start(load: LoadSummary | None, matrix: MatrixSummary | None) -> float | None:
    """The time faults are measured from: the barrier release of a soak, the first timed
    repetition of a matrix; None when neither ran."""
    if load is not None and load.issue_start_s is not None:
        return load.issue_start_s
    if matrix is not None:
        reps = [r for c in matrix.cells for r in c.reps]
        return reps[0].start_s if reps else None
    return None


def _source_kind(ev: dict[str, Any]) -> tuple[str, str]:
    data = ev.get("data") or {}
    if ev.get("kind") == "restart":
        return "engine metrics", "restart"
    if ev.get("kind") == "health":
        return "health", "endpoint_down"
    source = data.get("source")
    if source in ("dcgm", "nvml"):
        return f"gpu ({source})", str(data.get("fault") or "gpu")
    return "server log", str(data.get("fault") or "log")


def faults_from_events(
    events: Iterable[dict[str, Any]], load_start_s: float | None
) -> list[dict[str, Any]]:
    """Every fault, restart and endpoint-down event: ``time_s`` relative to the load start
    (None when no load ran; ``t_s`` is always since the run's origin), ``source``,
    ``kind``, ``severity``, ``detail`` (the event's words), and the replica or GPU."""
    out: list[dict[str, Any]] = []
    for ev in events:
        kind = ev.get("kind")
        if kind not in ("fault", "restart", "health"):
            continue
        if kind == "health" and ev.get("severity") not in ("error", "critical"):
            continue  # a recovery is not a fault
        data = ev.get("data") or {}
        t = float(data.get("t_s", ev["t"]))  # GPU sources say when they read it
        source, what = _source_kind(ev)
        item: dict[str, Any] = {
            "time_s": round(t - load_start_s, 3) if load_start_s is not None else None,
            "t_s": round(t, 3),
            "source": source,
            "kind": what,
            "severity": ev.get("severity"),
            "detail": ev.get("message"),
        }
        for key in ("replica", "endpoint", "gpu", "xid", "ignored"):
            if data.get(key) is not None:
                item[key] = data[key]
        out.append(item)
    return out
