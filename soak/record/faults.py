"""The record's ``faults[]``: every fault of the run on one timeline, relative to the load.

Built from ``events.jsonl`` (fault, restart and health-down events, whichever source
raised them), so ``soaktop verify`` recomputes it from the same journal. Times are given
relative to the barrier release (``load+00:17:02``): the question an on-call engineer asks
is "how far into the load did this happen", next to the requests it broke.

Each item is one source's report. One Xid reaches soaktop up to four ways (an NVML event,
DCGM's last-Xid gauge, the kernel's ``NVRM: Xid`` line, the CUDA error the engine logs):
``incident`` numbers the distinct faults, so the reports of one share a number and the
monitor's banner counts faults, not reports (:func:`distinct_faults`); every report and
its verdict reason are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soak.record.matrix import MatrixSummary
from soak.record.models import LoadSummary

SAME_FAULT_S = 10.0
"""Reports of one Xid this close in time are one fault. Each source is read once a
telemetry interval (1 s by default): the DCGM gauge at its next scrape, the kernel line
and the CUDA error it causes at the log's next poll, seconds apart."""
INCIDENTS_SINCE = (1, 3)
"""The schema version from which ``faults[i].incident`` is written."""
APP_SIDE = frozenset({"cuda_illegal_memory_access", "cuda_error"})
"""Server-log faults that are an Xid's consequence in the engine when one is near."""
_LOG_XID = re.compile(r"\bXid (\d+) on PCI:([0-9A-Fa-f:.]+?):? ")


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
    events: Iterable[dict[str, Any]], load_start_s: float | None, incidents: bool = True
) -> list[dict[str, Any]]:
    """Every fault, restart and endpoint-down event: ``time_s`` relative to the load start
    (None when no load ran; ``t_s`` is always since the run's origin), ``source``,
    ``kind``, ``severity``, ``detail`` (the event's words), the replica or GPU and (unless
    ``incidents=False``: a record older than ``INCIDENTS_SINCE``) ``incident``, the
    distinct fault each report belongs to (:func:`incident_numbers`)."""
    out: list[dict[str, Any]] = []
    gpus: list[tuple[Any, ...]] = []
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
        gpus.append(_gpu_of(data))
    if incidents:
        for item, number in zip(out, incident_numbers(out, gpus), strict=True):
            item["incident"] = number
    return out


def writes_incidents(schema_version: str) -> bool:
    """Whether a record of ``schema_version`` numbers its faults' ``incident``."""
    major, _, minor = schema_version.partition(".")
    return (int(major), int(minor or 0)) >= INCIDENTS_SINCE


def distinct_faults(events: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(distinct faults, reports) among the ``fault`` events: the banner's "1 fault"
    for an Xid that DCGM, the kernel log line and the CUDA error each reported."""
    shown = [ev for ev in events if ev.get("kind") == "fault"]
    items = faults_from_events(shown, None)
    return len({item["incident"] for item in items}), len(items)


@dataclass
class _Xid:
    """One Xid fault being gathered: its number, its first report and who reported it."""

    xid: int
    t_s: float
    gpus: list[tuple[Any, ...]] = field(default_factory=list)
    """The GPU sources' identities of the GPU (``_gpu_of``)."""
    logs: set[tuple[Any, str]] = field(default_factory=set)
    """(replica, PCI bus) of the kernel lines in the server logs."""

    def takes(
        self, xid: int, t_s: float, log: tuple[Any, str] | None, gpu: tuple[Any, ...]
    ) -> bool:
        """Whether a report of ``xid`` at ``t_s`` is this fault: the same Xid, near in
        time, the same GPU (a kernel line: the same replica and PCI bus as this fault's)."""
        if xid != self.xid or abs(t_s - self.t_s) > SAME_FAULT_S:
            return False
        if log is not None:
            return not self.logs or self.logs == {log}
        return all(_same_gpu(gpu, seen) for seen in self.gpus)

    def add(self, log: tuple[Any, str] | None, gpu: tuple[Any, ...]) -> None:
        if log is not None:
            self.logs.add(log)
        else:
            self.gpus.append(gpu)


def incident_numbers(items: list[dict[str, Any]], gpus: list[tuple[Any, ...]]) -> list[int]:
    """For each report (``faults_from_events``' items; ``gpus[i]``: the GPU the i-th names,
    ``_gpu_of``), the distinct fault it belongs to, numbered from 1 in order of first report.

    One Xid is one fault however many sources saw it: reports of the same Xid number
    within ``SAME_FAULT_S`` of its first, on the same GPU (GPU sources compare UUIDs, else
    indices and exporters; kernel lines their replica and PCI bus; a kernel line cannot be
    matched to a GPU index, so it joins whichever GPU's report of that Xid is near), and
    the CUDA errors the engine logs as its consequence (``APP_SIDE``, same replica, the
    nearest such Xid, before or after). Every other report is a fault of its own."""
    group: list[int | None] = [None] * len(items)
    xids: list[_Xid] = []
    for i, item in enumerate(items):
        xid, log = _xid_of(item)
        if xid is None:
            continue
        t = float(item["t_s"])
        found = next((n for n, g in enumerate(xids) if g.takes(xid, t, log, gpus[i])), None)
        if found is None:
            found = len(xids)
            xids.append(_Xid(xid=xid, t_s=t))
        xids[found].add(log, gpus[i])
        group[i] = found
    for i, item in enumerate(items):
        if item.get("source") == "server log" and item.get("kind") in APP_SIDE:
            group[i] = _nearest_xid(xids, float(item["t_s"]), item.get("replica"))
    numbers: dict[tuple[str, int], int] = {}
    out = []
    for i, found in enumerate(group):
        key = ("xid", found) if found is not None else ("own", i)
        out.append(numbers.setdefault(key, len(numbers) + 1))
    return out


def _nearest_xid(xids: list[_Xid], t: float, replica: Any) -> int | None:
    """The Xid fault nearest ``t`` (within ``SAME_FAULT_S``) that ``replica``'s engine may
    have felt: one its own log reported, or one only GPU sources saw."""
    near = [
        (abs(t - g.t_s), n)
        for n, g in enumerate(xids)
        if abs(t - g.t_s) <= SAME_FAULT_S and (not g.logs or replica in {r for r, _ in g.logs})
    ]
    return min(near)[1] if near else None


def _xid_of(item: dict[str, Any]) -> tuple[int | None, tuple[Any, str] | None]:
    """The Xid a report names and, for a server log's kernel line, (replica, PCI bus).
    A GPU source's report names it in ``xid`` (older writers left its kind ``gpu``)."""
    if item.get("source") == "server log":
        if item.get("kind") != "xid":
            return None, None
        m = _LOG_XID.search(str(item.get("detail") or ""))
        if m is None:
            return None, None
        return int(m.group(1)), (item.get("replica"), m.group(2).lower())
    xid = item.get("xid")
    return (int(xid) if isinstance(xid, int) else None), None


def _gpu_of(data: dict[str, Any]) -> tuple[Any, ...]:
    """A GPU source's identity of the GPU an event names: (UUID, index, exporter)."""
    return (data.get("uuid"), data.get("gpu"), data.get("url_index"))


def _same_gpu(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same GPU: the same UUID when both have one, else the same index (and the same
    DCGM exporter when both came from one; NVML has none)."""
    if a[0] is not None and b[0] is not None:
        return bool(a[0] == b[0])
    same_exporter = a[2] is None or b[2] is None or a[2] == b[2]
    return bool(a[1] == b[1] and same_exporter)
