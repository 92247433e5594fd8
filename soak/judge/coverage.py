"""Telemetry coverage: how much of the load each telemetry source actually saw.

Every source samples once an interval: each endpoint's ``/metrics`` and ``/health``, each
followed server log, each DCGM exporter, NVML, the host sampler. Over the load window
(barrier release → end of drain) a source was *expected* to take ``window / interval``
samples (or as many as it tried, when more); it *answered* the ones that gave something
usable — a ``/metrics`` that parsed into a known engine's families, an HTTP answer from
``/health``, a readable log file, a DCGM exporter with GPU fields, an NVML read that
returned. Garbage, a 404, a timeout or a hang is a sample not answered, with its why.

A source that answered less than ``LOST_SHARE`` (half) of its expected samples was *lost*
for the load: a note on the verdict, or a failure when the operator named its kind with
``--require-telemetry`` (``REQUIRE_KINDS``). A source nobody configured (no ``--dcgm``,
``--no-nvml``, no ``--server-log``) has no entry at all: it is absent, not lost (NVML
without a driver says "unavailable" once, in ``telemetry.gpu_sources``).

For a server log, answered means the file was open and readable at that poll (or the log
command still ran): a log nobody writes to is not lost — it read 0 lines, and says so —
but a file that does not exist or cannot be read is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from soak.record.models import Reason

LOST_SHARE = 0.5
"""Below this share of its expected samples a source counts as lost for the load."""
LIVE_MIN_EXPECTED = 5
"""Live (in snapshots), a source is judged only once this many samples were expected:
one late sample in the load's first seconds is not a lost source."""
MAX_KINDS = 6
"""Distinct failure kinds kept per source and key; the rest count as ``other``."""

REQUIRE_KINDS: dict[str, tuple[str, ...]] = {
    "engine": ("engine_metrics",),
    "gpu": ("dcgm", "nvml"),
    "health": ("health",),
    "log": ("server_log",),
    "host": ("host",),
}
"""``--require-telemetry`` names → the coverage sources each one stands for."""

SOURCE_WORDS = {
    "engine_metrics": "engine /metrics",
    "health": "/health",
    "server_log": "server log",
    "dcgm": "DCGM",
    "nvml": "NVML",
    "host": "host sampling",
}
"""The operator's word for each coverage source (reasons and the monitor say these)."""
_KIND_OF = {src: kind for kind, sources in REQUIRE_KINDS.items() for src in sources}


class LoadWindow:
    """The load's window on the run's clock, shared by every source's coverage."""

    def __init__(self) -> None:
        self.start_s: float | None = None
        self.end_s: float | None = None

    def open(self, t: float) -> None:
        """The barrier released (once; later calls do nothing)."""
        if self.start_s is None:
            self.start_s = t

    def close(self, t: float) -> None:
        """The drain ended (once; nothing if the window never opened)."""
        if self.start_s is not None and self.end_s is None:
            self.end_s = t

    def contains(self, t: float) -> bool:
        """Whether a sample begun at ``t`` belongs to the load."""
        if self.start_s is None or t < self.start_s:
            return False
        return self.end_s is None or t <= self.end_s

    def length(self, now_s: float) -> float | None:
        """Seconds covered so far (None before the barrier)."""
        if self.start_s is None:
            return None
        return max(0.0, (self.end_s if self.end_s is not None else now_s) - self.start_s)


@dataclass
class _Tally:
    answered: int = 0
    missed: int = 0
    whys: Counter[str] = field(default_factory=Counter)


class Coverage:
    """One source's samples inside the load window, per key (endpoint, exporter, log)."""

    def __init__(self, interval_s: float, window: LoadWindow, keys: Iterable[str] = ()) -> None:
        self.interval_s = interval_s
        self.window = window
        self._tallies: dict[str, _Tally] = {k: _Tally() for k in keys}
        self.extra: dict[str, dict[str, Any]] = {}
        """Per key, facts beside the counts (a log's lines read)."""

    def add_key(self, key: str) -> None:
        """Expect samples from ``key`` (one that never answers shows 0 of N)."""
        self._tallies.setdefault(key, _Tally())

    def sample(self, key: str, t: float, why: str | None = None) -> None:
        """One sample of ``key`` begun at ``t``: answered when ``why`` is None, else not
        answered because of ``why`` (a stable kind: "HTTP 404", "timed out after 0.8 s")."""
        if not self.window.contains(t):
            return
        tally = self._tallies.setdefault(key, _Tally())
        if why is None:
            tally.answered += 1
            return
        tally.missed += 1
        kind = why[:160]
        tally.whys[kind if kind in tally.whys or len(tally.whys) < MAX_KINDS else "other"] += 1

    def summary(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """Per key ``{answered, expected, share, lost, why, failures}`` over the window so
        far; empty before the barrier. ``lost`` is judged once ``min_expected`` samples
        were expected (a window shorter than one interval judges nothing)."""
        length = self.window.length(now_s)
        if length is None:
            return {}
        nominal = int(length / self.interval_s + 1e-9)
        out: dict[str, dict[str, Any]] = {}
        for key, tally in self._tallies.items():
            expected = max(nominal, tally.answered + tally.missed)
            share = round(tally.answered / expected, 3) if expected else None
            entry: dict[str, Any] = {
                "answered": tally.answered,
                "expected": expected,
                "share": share,
                "lost": share is not None and expected >= min_expected and share < LOST_SHARE,
                "why": tally.whys.most_common(1)[0][0] if tally.whys else None,
            }
            if tally.whys:
                entry["failures"] = dict(tally.whys)
            out[key] = entry | self.extra.get(key, {})
        return out


class HasCoverage(Protocol):
    """A watcher that reports its coverage (``{source: {key: entry}}``)."""

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """Its sources' coverage over the load window so far."""
        ...


def gather(
    watchers: Iterable[HasCoverage | None], now_s: float, min_expected: int = 1
) -> dict[str, dict[str, Any]]:
    """Every watcher's coverage in one dict (the record's ``telemetry.coverage``)."""
    out: dict[str, dict[str, Any]] = {}
    for w in watchers:
        if w is not None:
            out |= {src: keys for src, keys in w.coverage(now_s, min_expected).items() if keys}
    return out


def parse_required(names: Iterable[str]) -> list[str]:
    """Validated ``--require-telemetry`` names (ValueError: a sentence naming the bad one)."""
    out: list[str] = []
    for raw in names:
        name = raw.strip().lower()
        if name not in REQUIRE_KINDS:
            allowed = ", ".join(REQUIRE_KINDS)
            raise ValueError(f"{raw!r} is not a telemetry source; allowed: {allowed}")
        if name not in out:
            out.append(name)
    return out


def coverage_reasons(telemetry: Mapping[str, Any], required: Iterable[str] = ()) -> list[Reason]:
    """One reason per source lost for the load (``telemetry_lost``): a note, or ``failed``
    when its kind is required. A required GPU kind with no GPU source at all (NVML
    unavailable, no DCGM) fails too (``telemetry_missing``). Derived from the record's
    ``telemetry`` alone, so ``soaktop verify`` recomputes it word for word."""
    need = set(required)
    cov = telemetry.get("coverage") or {}
    out: list[Reason] = []
    for source, keys in cov.items():
        kind = _KIND_OF.get(source, source)
        for key, e in (keys or {}).items():
            if not isinstance(e, Mapping) or not e.get("lost"):
                continue
            why = e.get("why") or "no sample taken"
            share = e.get("share") or 0.0
            tail = f"; required (--require-telemetry {kind})" if kind in need else ""
            word = SOURCE_WORDS.get(source, source)
            out.append(
                Reason(
                    code="telemetry_lost",
                    effect="failed" if kind in need else "note",
                    message=f"{word} of {key} answered {e.get('answered')}"
                    f" of {e.get('expected')} expected samples during the load "
                    f"({share:.0%}; {why}): its telemetry was lost{tail}",
                )
            )
    if "gpu" in need and cov and not any(cov.get(s) for s in REQUIRE_KINDS["gpu"]):
        why = "; ".join(
            f"{s.get('source')}: {s.get('reason') or s.get('status')}"
            for s in telemetry.get("gpu_sources") or []
            if isinstance(s, Mapping)
        )
        out.append(
            Reason(
                code="telemetry_missing",
                effect="failed",
                message="GPU telemetry is required (--require-telemetry gpu) but no GPU "
                f"source gave any reading during the load ({why or 'none configured'})",
            )
        )
    return out


def coverage_problems(telemetry: Mapping[str, Any]) -> list[str]:
    """Entries of a record's ``telemetry.coverage`` that contradict themselves (share not
    answered / expected, ``lost`` not what the share implies), for ``soaktop verify``."""
    out: list[str] = []
    for source, keys in (telemetry.get("coverage") or {}).items():
        for key, e in (keys or {}).items():
            where = f"telemetry.coverage.{source}.{key}"
            try:
                answered, expected = int(e["answered"]), int(e["expected"])
                share, lost = e["share"], bool(e["lost"])
            except (KeyError, TypeError, ValueError):
                out.append(f"{where}: not a coverage entry ({e!r:.120})")
                continue
            want = round(answered / expected, 3) if expected else None
            if answered > expected or share != want:
                out.append(f"{where}: share {share!r} is not {answered}/{expected}")
            elif lost != (want is not None and want < LOST_SHARE):
                said = "lost" if lost else "not lost"
                out.append(f"{where}: {said}, but {answered} of {expected} answered")
    return out
