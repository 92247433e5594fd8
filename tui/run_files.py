"""The run directory's one-shot files, read through their writers' models: the config
and identity (the run's target, written at start) and ``record.json`` (the verdict).

No Textual here. A file that does not exist yet, or cannot be read, is None; one that
does not quite validate is read as far as it can be (:func:`parse`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from soak.record.lenient import Lenient, Loc, M, read
from soak.record.models import Identity, RunRecord


def parse(
    model: type[M], data: bytes | Mapping[str, Any], must_have: frozenset[Loc] = frozenset()
) -> Lenient[M]:
    """``data`` (a line's or a file's bytes, or an event's parsed ``data``) as ``model``,
    as the monitor reads what the runner writes (:func:`soak.record.lenient.read`): a
    value of the wrong type, or the list item holding it, is left out, and a required
    key the line lacks reads as its "no data" placeholder. The monitor shows what it can
    of a live line: one odd value, or a key a newer soaktop added, must not blank the
    screen. ``value`` is None for a line of another major version, or one nothing can be
    kept of, or one with a problem at a ``must_have`` location (where an invented value
    would be plotted): the caller skips and counts it."""
    return read(model, data, on_wrong_type="drop", on_item_missing="fill", must_have=must_have)


class PlannedRun(BaseModel):
    """What the monitor reads of ``config.json`` (``soak.run.config.RunConfig``'s public
    dict, which the record, too, keeps as free-form JSON): the rest is ignored. The
    config's own model is no reader's: it checks that the run's files and URLs are there
    now, and a finished run's are long gone."""

    endpoints: list[str] | None = None
    """Base URLs (``<endpoint i>`` with --redact): how many replicas."""
    model: str | None = None
    engine: str | None = None
    concurrency: int | None = None
    duration_s: float | None = None
    drain_timeout_s: float | None = None
    matrix: str | None = None
    """The matrix profile's specification (``--matrix``), in a matrix run."""
    require_telemetry: list[str] = Field(default_factory=list)
    """``--require-telemetry`` kinds: their lost sources fail the run."""


@dataclass(frozen=True)
class RunMeta:
    """What the run is aimed at, from ``config.json`` / ``identity.json`` (may be empty)."""

    run_dir: Path
    model: str | None = None
    endpoints: int | None = None
    engine: str | None = None
    concurrency: int | None = None
    duration_s: float | None = None
    matrix: str | None = None
    """``input=6000,25000 concurrency=1,4 reps=3 requests=4``: a matrix run's plan."""
    required_telemetry: tuple[str, ...] = ()
    """The ``--require-telemetry`` kinds (``soak.judge.coverage.REQUIRE_KINDS``)."""

    @property
    def target(self) -> str:
        """``2 endpoints · tiny-sim`` (what is known)."""
        parts = []
        if self.endpoints is not None:
            parts.append(f"{self.endpoints} endpoint{'s' if self.endpoints != 1 else ''}")
        if self.model:
            parts.append(self.model)
        if self.engine:
            parts.append(self.engine)
        return " / ".join(parts) if parts else "target unknown"


def read_planned(run_dir: Path) -> PlannedRun | None:
    """``config.json`` once it exists, else None."""
    return _read(run_dir / "config.json", PlannedRun)


def read_meta(run_dir: Path) -> RunMeta | None:
    """The run's target from its config (written at start) and identity, None before."""
    cfg = read_planned(run_dir)
    ident = _read(run_dir / "identity.json", Identity)
    if cfg is None and ident is None:
        return None
    n_endpoints = len(cfg.endpoints) if cfg is not None and cfg.endpoints is not None else None
    if n_endpoints is None and ident is not None and ident.endpoints:
        n_endpoints = len(ident.endpoints)
    return RunMeta(
        run_dir=run_dir,
        model=(ident.model if ident else None) or (cfg.model if cfg else None),
        endpoints=n_endpoints,
        engine=(ident.engine if ident else None) or (cfg.engine if cfg else None),
        concurrency=cfg.concurrency if cfg else None,
        duration_s=cfg.duration_s if cfg else None,
        matrix=cfg.matrix if cfg else None,
        required_telemetry=tuple(cfg.require_telemetry) if cfg else (),
    )


def read_record(run_dir: Path) -> RunRecord | None:
    """``record.json`` once it exists (it is written atomically), else None."""
    return _read(run_dir / "record.json", RunRecord)


def _read(path: Path, model: type[M]) -> M | None:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    return parse(model, raw).value
