"""GPU telemetry from an NVIDIA dcgm-exporter ``/metrics`` endpoint (remote nodes).

Parsed with ``prometheus_client``'s parser (never substring matching) and mapped to the
GPU vocabulary (:class:`probes.gpu_reading.GpuReading`), one reading per GPU; a GPU is
keyed by the exporter's ``Hostname`` label, its ``gpu`` index and its ``UUID``. A field
the exporter does not export is ``None`` ("not supported"), never zero and never
estimated. dcgm-exporter's default counters file exports framebuffer used/free,
utilisation, temperature, power, SM clock, the last Xid, PCIe replays and row remapping;
the ECC totals, framebuffer total/reserved, power limit and clock-event reasons appear
only when the operator's counters file asks for them.

Two things about the exporter a reader must know:

- dcgm-exporter declares counters without ``_total``; ``prometheus_client``'s parser then
  names their samples ``<name>_total``. Fields are therefore matched by *family* name.
- ``DCGM_FI_DEV_XID_ERRORS`` is the value of the last Xid, not a count, and it is sticky:
  it keeps that value until the exporter restarts, and a second Xid of the same number
  does not change it. Turning changes into events is the caller's business.

With MIG, per-instance samples (label ``GPU_I_ID``) are folded into their GPU: a
device-level sample wins; otherwise framebuffer figures add up and the rest take the
largest instance value.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from probes.engine_metrics import get_page
from probes.gpu_reading import GpuReading, throttle_words
from probes.neterrors import client_side

# vocabulary key → DCGM field names, the first one present wins
FIELDS: dict[str, tuple[str, ...]] = {
    "memory_used_mib": ("DCGM_FI_DEV_FB_USED",),
    "memory_free_mib": ("DCGM_FI_DEV_FB_FREE",),
    "memory_total_mib": ("DCGM_FI_DEV_FB_TOTAL",),
    "memory_reserved_mib": ("DCGM_FI_DEV_FB_RESERVED",),
    "util_percent": ("DCGM_FI_DEV_GPU_UTIL",),
    "temperature_c": ("DCGM_FI_DEV_GPU_TEMP",),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE",),
    "power_limit_w": ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT"),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK",),
    "throttle_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    "last_xid": ("DCGM_FI_DEV_XID_ERRORS",),
    "ecc_dbe_volatile": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
    "ecc_dbe_aggregate": ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",),
    "row_remap_failure": ("DCGM_FI_DEV_ROW_REMAP_FAILURE",),
    "row_remap_pending": ("DCGM_FI_DEV_ROW_REMAP_PENDING",),
    "remapped_rows_uncorrectable": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",),
    "pcie_replays": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
}
"""The DCGM fields this module reads. ``CLOCKS_EVENT_REASONS`` is the DCGM 3.3+ name of
``CLOCK_THROTTLE_REASONS``; the enforced power limit is preferred to the management one."""

_SUMMED_UNDER_MIG = frozenset(
    {"memory_used_mib", "memory_free_mib", "memory_total_mib", "memory_reserved_mib"}
)


@dataclass(frozen=True)
class DcgmSample:
    """One scrape of one exporter: the GPUs, or why there are none."""

    t: float
    """Seconds since the caller's monotonic origin (``perf_counter_ns``)."""
    readings: list[GpuReading] = field(default_factory=list)
    error: str | None = None


_Key = tuple[str | None, int | None, str | None]


def _gpu_key(labels: dict[str, str]) -> _Key | None:
    uuid = labels.get("UUID") or labels.get("uuid") or None
    raw = labels.get("gpu")
    index: int | None
    try:
        index = int(raw) if raw is not None and raw != "" else None
    except ValueError:
        index = None
    if index is None and uuid is None:
        return None  # not a GPU sample (NVSwitch, CPU, node-wide counts)
    return (labels.get("Hostname") or None, index, uuid)


def _metrics_url(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else f"{url}/metrics"


def parse_dcgm(text: str) -> list[GpuReading]:
    """Map a dcgm-exporter exposition text to one ``GpuReading`` per GPU, ordered by host,
    index and UUID. Raises ``ValueError`` on text the Prometheus parser rejects."""
    wanted = {name: key for key, names in FIELDS.items() for name in names}
    # key → field name → (device-level values, per-instance values)
    found: dict[_Key, dict[str, tuple[list[float], list[float]]]] = {}
    names: dict[_Key, str] = {}
    xid_msgs: dict[_Key, str] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in wanted:
            continue
        for s in fam.samples:
            if s.name not in (fam.name, f"{fam.name}_total"):
                continue  # ``_created`` and the like
            key = _gpu_key(s.labels)
            if key is None or s.value is None or math.isnan(s.value):
                continue
            if key not in names and s.labels.get("modelName"):
                names[key] = s.labels["modelName"]
            if fam.name == "DCGM_FI_DEV_XID_ERRORS" and s.labels.get("err_msg"):
                xid_msgs[key] = s.labels["err_msg"]
            dev, inst = found.setdefault(key, {}).setdefault(fam.name, ([], []))
            (inst if s.labels.get("GPU_I_ID") else dev).append(float(s.value))
    out = [
        _reading(key, names.get(key), xid_msgs.get(key), per_field)
        for key, per_field in found.items()
    ]
    out.sort(key=lambda r: (r.host or "", r.index if r.index is not None else -1, r.uuid or ""))
    return out


def _reading(
    key: _Key,
    name: str | None,
    xid_message: str | None,
    per_field: dict[str, tuple[list[float], list[float]]],
) -> GpuReading:
    v: dict[str, float | None] = {}
    for vkey, fields in FIELDS.items():
        v[vkey] = None
        for f in fields:
            if f not in per_field:
                continue
            dev, inst = per_field[f]
            if dev:
                v[vkey] = dev[0]
            elif inst:
                v[vkey] = sum(inst) if vkey in _SUMMED_UNDER_MIG else max(inst)
            if v[vkey] is not None:
                break
    used, free, reserved = v["memory_used_mib"], v["memory_free_mib"], v["memory_reserved_mib"]
    total = v["memory_total_mib"]
    if total is None and used is not None and free is not None and reserved is not None:
        total = used + free + reserved
    mask = _int(v["throttle_reasons"])
    xid = _int(v["last_xid"])
    host, index, uuid = key
    return GpuReading(
        host=host,
        index=index,
        uuid=uuid,
        name=name,
        memory_used_mib=used,
        memory_free_mib=free,
        memory_total_mib=total,
        util_percent=v["util_percent"],
        temperature_c=v["temperature_c"],
        power_w=v["power_w"],
        power_limit_w=v["power_limit_w"],
        sm_clock_mhz=v["sm_clock_mhz"],
        throttle_reasons=mask,
        throttle=throttle_words(mask) if mask is not None else None,
        last_xid=xid,
        xid_message=xid_message if xid else None,
        ecc_dbe_volatile=_int(v["ecc_dbe_volatile"]),
        ecc_dbe_aggregate=_int(v["ecc_dbe_aggregate"]),
        row_remap_failure=_bool(v["row_remap_failure"]),
        row_remap_pending=_bool(v["row_remap_pending"]),
        remapped_rows_uncorrectable=_int(v["remapped_rows_uncorrectable"]),
        pcie_replays=_int(v["pcie_replays"]),
    )


def _int(x: float | None) -> int | None:
    return None if x is None else int(x)


def _bool(x: float | None) -> bool | None:
    return None if x is None else x != 0


async def fetch_dcgm(
    client: httpx.AsyncClient, url: str, origin_ns: int = 0
) -> tuple[float, bytes] | DcgmSample:
    """GET the exporter's ``/metrics`` once (``get_page``: bounded in size): (t, page), or
    a sample with ``error`` set."""
    t = (time.perf_counter_ns() - origin_ns) / 1e9
    try:
        got = await get_page(client, _metrics_url(url))
    except (httpx.HTTPError, OSError) as e:  # a socket that cannot be made escapes bare
        error = client_side(e) or (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        return DcgmSample(t=t, error=error)
    if isinstance(got, str):
        return DcgmSample(t=t, error=got)
    return t, got


def dcgm_sample(t: float, readings: list[GpuReading]) -> DcgmSample:
    """The sample of parsed readings: an answer without any GPU field is an error (a
    wrong URL, e.g. an engine's own ``/metrics``)."""
    if not readings:
        return DcgmSample(t=t, error="no DCGM GPU fields in /metrics (not a dcgm-exporter?)")
    return DcgmSample(t=t, readings=readings)


def parse_dcgm_page(body: bytes) -> list[GpuReading]:
    """``parse_dcgm`` of fetched bytes (UTF-8, other bytes replaced); ValueError as it."""
    return parse_dcgm(body.decode("utf-8", errors="replace"))


async def scrape_dcgm(client: httpx.AsyncClient, url: str, origin_ns: int = 0) -> DcgmSample:
    """GET the exporter's ``/metrics`` once (``url`` with or without ``/metrics``) and parse
    it on the caller's loop. A failure is a sample with ``error`` set, never a raise; so is
    an answer without any GPU field."""
    got = await fetch_dcgm(client, url, origin_ns)
    if isinstance(got, DcgmSample):
        return got
    t, body = got
    try:
        readings = parse_dcgm_page(body)
    except ValueError as e:
        return DcgmSample(t=t, error=f"unparsable /metrics: {e}")
    return dcgm_sample(t, readings)
