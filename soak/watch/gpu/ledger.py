"""The per-GPU rules shared by every GPU source (DCGM exporters, NVML) and the entries
they write.

:class:`GpuLedger` keeps, per GPU, the extremes over the run, the throttle words seen and
the faults, and turns the faults into ``fault`` events and ``gpu_fault`` verdict reasons:

- **Xid changes.** A sticky last-Xid gauge (DCGM): the first value is the baseline (a
  non-zero one is a note, "already set"), a later change to non-zero is a new Xid (fails
  the run), back to 0 only moves the baseline. Or Xids delivered as events (NVML): each
  one fails the run.
- **ECC growth.** Growth of the uncorrectable ECC count (volatile, else aggregate) fails
  the run; a count already there at the first reading is history, a drop moves the
  baseline.
- **Row remaps.** Growth of the rows remapped after uncorrectable errors fails the run;
  row remapping turning failed fails it too (already failed at the first reading: a note).
- **Lost GPUs.** The source decides when a GPU is lost or missing (``GpuState.status``)
  and reports it through :meth:`GpuLedger.fault`.

It also builds the snapshot entry (:meth:`GpuLedger.view_entry`), the record entry
(:meth:`GpuLedger.summary_entry`) and the identity entry (:meth:`GpuLedger.identity_entry`)
of a GPU, so that every source writes the same shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from probes.gpu_reading import GpuReading
from probes.xid import xid_meaning
from soak.judge.faults import MAX_GPU_REASONS
from soak.record.events import EventLog, Severity
from soak.record.models import Reason

MAX_XID_EVENTS_PER_GPU = 50
"""The record keeps this many Xid changes per GPU (a flapping gauge must not grow the
record without bound); later ones are counted in ``xid_events_dropped``."""
MAX_REASONS = MAX_GPU_REASONS
"""At most this many fault reasons reach the verdict; one more says how many were left out
(the judge's cap, which finalize, recover and verify apply to the events)."""

_Effect = Literal["failed", "note"]


@dataclass
class GpuState:
    """Everything kept about one GPU (bounded: extremes, counts, capped lists)."""

    key: Hashable
    index: int | None
    name: str | None
    host: str | None
    """Scrubbed."""
    uuid: str | None
    """Scrubbed."""
    at_start: bool
    """First read in the source's first sample."""
    where: str
    """The source in words for reasons, e.g. "DCGM exporter 0" or "NVML"."""
    tag: dict[str, Any] = field(default_factory=dict)
    """Extra identification that leads every entry (``{"url_index": 0}`` for DCGM)."""
    status: str = "ok"
    """``ok``; ``missing`` (DCGM: out of the exporter's output); ``lost`` (NVML)."""
    latest: GpuReading | None = None
    t: float | None = None
    """When ``latest`` was read."""
    samples: int = 0
    min_free: float | None = None
    max_used: float | None = None
    max_temp: float | None = None
    max_power: float | None = None
    last_xid: int | None = None
    """The GPU's last Xid, whichever way it came: the gauge's value (DCGM; 0: none since
    the exporter started) or the last Xid event (NVML; None until one). The one copy the
    snapshot (:meth:`GpuLedger.view_entry`) and the record (``summary_entry``) both read:
    a reading's own ``last_xid`` is only the gauge, and NVML readings never carry one."""
    xid_events: list[dict[str, Any]] = field(default_factory=list)
    xid_events_dropped: int = 0
    ecc_last: int | None = None
    ecc_new: int = 0
    rows_last: int | None = None
    rows_new: int = 0
    remap_failed: bool | None = None
    throttle_seen: list[str] = field(default_factory=list)
    throttle_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent under each throttle reason (sample and hold between readings)."""
    faults: int = 0


class GpuLedger:
    """Per-GPU bookkeeping for a GPU telemetry source: extremes over the run, throttle
    words seen, Xids (a sticky "last Xid" gauge as DCGM exports it, or Xid events as NVML
    delivers them) and memory-health faults as ``fault`` events and verdict reasons, and
    the snapshot / record / identity entries.

    The source keeps its own sampling and transport trouble (scrape errors, a GPU missing
    from the output, a lost GPU) and calls :meth:`fault` for what is a fault.
    """

    def __init__(
        self,
        source: str,
        events: EventLog,
        scrub: Callable[[Any], Any] = lambda v: v,
        ignore_xid: frozenset[int] = frozenset(),
        when: Callable[[float], str] = lambda t: f"at {t:.1f} s",
    ) -> None:
        self.source = source
        self.when_run = when
        """Words for a run time in reasons (``at load+00:17:02`` once the load began)."""
        self.ignore_xid = ignore_xid
        """Xid codes the operator waived (``--ignore-xid``): recorded, a note, not a failure."""
        self.gpus: dict[Hashable, GpuState] = {}
        self._events = events
        self._scrub = scrub
        self._reasons: list[Reason] = []
        self._reasons_dropped: dict[_Effect, int] = {"failed": 0, "note": 0}

    def text(self, s: str | None) -> str | None:
        """``s`` scrubbed (None stays None)."""
        return None if s is None else str(self._scrub(s))

    def add(
        self,
        key: Hashable,
        r: GpuReading,
        *,
        at_start: bool,
        where: str,
        tag: dict[str, Any] | None = None,
    ) -> GpuState:
        """A new GPU, identified by the reading's index, name, host and UUID. The host and
        UUID are scrubbed as the fields they are (the redactor learns them: a host name has
        no shape text could be recognised by), and kept only in that form."""
        ids = self._scrub({"host": r.host, "uuid": r.uuid})
        g = self.gpus[key] = GpuState(
            key=key,
            index=r.index,
            name=r.name,
            host=None if ids.get("host") is None else str(ids["host"]),
            uuid=None if ids.get("uuid") is None else str(ids["uuid"]),
            at_start=at_start,
            where=where,
            tag=dict(tag or {}),
        )
        return g

    # -- one reading -------------------------------------------------------------------
    def reading(self, g: GpuState, r: GpuReading, t: float) -> None:
        """Take one reading of ``g`` taken at ``t`` (seconds since the run's origin)."""
        g.samples += 1
        if g.latest is not None and g.t is not None and g.latest.throttle:
            # the reasons of the previous reading held until this one
            for word in g.latest.throttle:
                g.throttle_s[word] = g.throttle_s.get(word, 0.0) + max(0.0, t - g.t)
        g.latest = r
        g.t = t
        g.name = r.name or g.name
        g.min_free = _lower(g.min_free, r.memory_free_mib)
        g.max_used = _higher(g.max_used, r.memory_used_mib)
        g.max_temp = _higher(g.max_temp, r.temperature_c)
        g.max_power = _higher(g.max_power, r.power_w)
        for word in r.throttle or ():
            if word not in g.throttle_seen:
                g.throttle_seen.append(word)
        self.xid_gauge(g, r, t)
        self.memory_health(g, r, t)

    def when(self, g: GpuState, t: float) -> str:
        """When a value already set at its first reading was read."""
        return "at start" if g.at_start and g.samples == 1 else f"when first read at {t:.1f} s"

    def xid_gauge(self, g: GpuState, r: GpuReading, t: float) -> None:
        """A sticky last-Xid gauge (DCGM): the first value is the baseline (a non-zero one
        is a note), a later change to non-zero is a new Xid, back to 0 moves the baseline."""
        xid = r.last_xid
        if xid is None:
            return
        prev, g.last_xid = g.last_xid, xid
        first = prev is None  # the baseline
        if xid == 0 or xid == prev:
            return  # nothing yet, nothing new, or the exporter restarted (back to 0)
        meaning = xid_meaning(xid, r.xid_message)
        if first:
            when = self.when(g, t)
            self.fault(
                g,
                f"{self.label(g)}: Xid {xid} — {meaning} (already set {when})",
                "warning",
                reason=f"{self.label(g)}: Xid {xid} — {meaning} was already set {when} "
                f"({g.where}; time unknown, not counted as a run fault)",
                effect="note",
                kind="xid",
                xid=xid,
                meaning=meaning,
                t_s=t,
                already_set=True,
            )
        else:
            self._xid_fault(g, xid, meaning, t)
        self._xid_record(g, xid, meaning, t, already_set=first)

    def xid_event(self, g: GpuState, xid: int, t: float) -> None:
        """An Xid delivered as an event (NVML), at ``t``: a critical fault."""
        g.last_xid = xid
        meaning = xid_meaning(xid)
        self._xid_fault(g, xid, meaning, t)
        self._xid_record(g, xid, meaning, t, already_set=False)

    def _xid_fault(self, g: GpuState, xid: int, meaning: str, t: float) -> None:
        waived = xid in self.ignore_xid
        self.fault(
            g,
            f"{self.label(g)}: Xid {xid} — {meaning}"
            + (" (ignored: --ignore-xid)" if waived else ""),
            "warning" if waived else "critical",
            reason=f"{self.label(g)}: Xid {xid} — {meaning}, {self.when_run(t)} "
            f"({g.where})" + ("; waived by --ignore-xid" if waived else ""),
            effect="note" if waived else "failed",
            kind="xid",
            **({"ignored": True} if waived else {}),
            xid=xid,
            meaning=meaning,
            t_s=t,
            already_set=False,
        )

    def _xid_record(
        self, g: GpuState, xid: int, meaning: str, t: float, *, already_set: bool
    ) -> None:
        event = {"t_s": round(t, 3), "xid": xid, "meaning": meaning, "already_set": already_set}
        if len(g.xid_events) < MAX_XID_EVENTS_PER_GPU:
            g.xid_events.append(event)
        else:
            g.xid_events_dropped += 1

    def memory_health(self, g: GpuState, r: GpuReading, t: float) -> None:
        """New uncorrectable ECC errors, rows remapped after them, row remapping failed."""
        ecc = r.ecc_dbe_volatile if r.ecc_dbe_volatile is not None else r.ecc_dbe_aggregate
        which = "volatile" if r.ecc_dbe_volatile is not None else "aggregate"
        if ecc is not None:
            if g.ecc_last is not None and ecc > g.ecc_last:
                d = ecc - g.ecc_last
                g.ecc_new += d
                msg = f"{self.label(g)}: {d} new uncorrectable ECC error(s) ({which} total {ecc})"
                self.fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, {self.when_run(t)}",
                    effect="failed",
                    kind="ecc_uncorrectable",
                    ecc_new=d,
                    ecc_total=ecc,
                    t_s=t,
                )
            g.ecc_last = ecc  # a drop (driver reload) only moves the baseline
        rows = r.remapped_rows_uncorrectable
        if rows is not None:
            if g.rows_last is not None and rows > g.rows_last:
                d = rows - g.rows_last
                g.rows_new += d
                msg = (
                    f"{self.label(g)}: {d} more row(s) remapped after uncorrectable "
                    f"memory errors (total {rows})"
                )
                self.fault(
                    g,
                    msg,
                    "critical",
                    reason=f"{msg}, {self.when_run(t)}",
                    effect="failed",
                    kind="row_remap",
                    remapped_rows_new=d,
                    remapped_rows_total=rows,
                    t_s=t,
                )
            g.rows_last = rows
        failed = r.row_remap_failure
        if failed is not None:
            if failed and not g.remap_failed:
                msg = f"{self.label(g)}: row remapping failed — the GPU needs service"
                if g.remap_failed is None:  # the baseline
                    when = self.when(g, t)
                    self.fault(
                        g,
                        f"{msg} (already set {when})",
                        "warning",
                        reason=f"{msg} (already set {when}; not counted as a run fault)",
                        effect="note",
                        kind="row_remap_failed",
                        t_s=t,
                        already_set=True,
                    )
                else:
                    self.fault(
                        g,
                        msg,
                        "critical",
                        reason=f"{msg}, {self.when_run(t)}",
                        effect="failed",
                        kind="row_remap_failed",
                        t_s=t,
                    )
            g.remap_failed = failed

    def fault(
        self,
        g: GpuState,
        message: str,
        severity: Severity,
        *,
        reason: str,
        effect: _Effect,
        kind: str,
        **data: Any,
    ) -> None:
        """A ``fault`` event now (``kind``: xid, ecc_uncorrectable, row_remap,
        row_remap_failed, gpu_lost, gpu_missing) and a ``gpu_fault`` reason for the verdict."""
        g.faults += 1
        # The verdict's words and effect travel with the event: finalize, recover and verify
        # all judge GPU faults from events.jsonl (soak.judge.faults.gpu_fault_reasons).
        verdict = {"fault": kind, "reason": reason, "effect": effect}
        self._events.emit("fault", message, severity, **(self.data(g) | verdict | data))
        if len(self._reasons) < MAX_REASONS:
            self._reasons.append(Reason(code="gpu_fault", effect=effect, message=reason))
        else:
            self._reasons_dropped[effect] += 1

    def label(self, g: GpuState) -> str:
        """``GPU 1 (NVIDIA H200, host node-7)``."""
        if g.index is not None:
            who = f"GPU {g.index}"
        elif g.uuid is not None:
            who = f"GPU {g.uuid}"
        else:
            who = "an unidentified GPU"
        parts = [p for p in (g.name, f"host {g.host}" if g.host else None) if p]
        return f"{who} ({', '.join(parts)})" if parts else who

    def data(self, g: GpuState) -> dict[str, Any]:
        """The event data that says which GPU."""
        return (
            {"source": self.source}
            | g.tag
            | {"gpu": g.index, "name": g.name, "host": g.host, "uuid": g.uuid}
        )

    # -- outputs -----------------------------------------------------------------------
    def ident(self, g: GpuState) -> dict[str, object]:
        return g.tag | {"index": g.index, "name": g.name, "host": g.host}

    def view_entry(self, g: GpuState) -> dict[str, object]:
        """The snapshot entry: latest values (None: not exported / not supported), the
        GPU's ``last_xid`` (from :attr:`GpuState.last_xid`, as the record's) and fault count,
        or just the status when the GPU is not ``ok`` or has no reading yet."""
        r = g.latest
        if g.status != "ok":
            return self.ident(g) | {"status": g.status}
        if r is None:
            return self.ident(g) | {"status": "no data yet"}
        return self.ident(g) | {
            "status": "ok",
            "t": g.t,
            "memory_free_mib": r.memory_free_mib,
            "memory_used_mib": r.memory_used_mib,
            "memory_total_mib": r.memory_total_mib,
            "util_percent": r.util_percent,
            "temperature_c": r.temperature_c,
            "power_w": r.power_w,
            "power_limit_w": r.power_limit_w,
            "sm_clock_mhz": r.sm_clock_mhz,
            "throttle": list(r.throttle) if r.throttle is not None else None,
            "last_xid": g.last_xid,
            "faults": g.faults,
        }

    def summary_entry(self, g: GpuState) -> dict[str, object]:
        """The record entry: extremes (None: never read), Xids, new ECC errors and
        remapped rows, throttle words seen, samples."""
        return self.ident(g) | {
            "uuid": g.uuid,
            "min_free_mib": g.min_free,
            "max_used_mib": g.max_used,
            "max_temp_c": g.max_temp,
            "max_power_w": g.max_power,
            "last_xid": g.last_xid,
            "xid_events": list(g.xid_events),
            "xid_events_dropped": g.xid_events_dropped,
            "ecc_new": g.ecc_new if g.ecc_last is not None else None,
            "remapped_rows_new": g.rows_new if g.rows_last is not None else None,
            "remap_failed": g.remap_failed,
            "throttle_seen": list(g.throttle_seen),
            "throttle_s": {k: round(v, 3) for k, v in g.throttle_s.items()},
            "samples": g.samples,
        }

    def identity_entry(self, g: GpuState) -> dict[str, object]:
        return self.ident(g) | {"uuid": g.uuid, "source": self.source}

    def fault_reasons(self) -> list[Reason]:
        """One reason per GPU fault (code ``gpu_fault``), then one per effect saying how
        many were left out past ``MAX_REASONS``."""
        out = list(self._reasons)
        for effect, n in self._reasons_dropped.items():
            if n:
                out.append(
                    Reason(
                        code="gpu_fault",
                        effect=effect,
                        message=f"{n} more GPU fault(s) not listed (see events.jsonl)",
                    )
                )
        return out


def _lower(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b < a else a


def _higher(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b > a else a
