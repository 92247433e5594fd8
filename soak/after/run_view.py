"""One run directory as ``compare``, ``runs`` and ``report`` read it (:class:`RunView`).

Records are read defensively (:func:`read_run`): a record written by an older or newer
soaktop, which lacks keys :class:`~soak.record.models.RunRecord` requires or has keys it does
not declare, is still read into the model (:func:`soak.after.record_view.read_leniently`), and
those keys are named in ``problems`` instead of crashing the command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from soak.after.record_view import read_leniently
from soak.record.models import RunRecord, Status
from soak.record.status_label import flagged, label_of, valid_status

RUN_FILES = ("record.json", "config.json", "runner.pid")
"""A directory holding any of these is a soaktop run directory."""


class NotARunDir(ValueError):
    """The path is not a soaktop run directory (the message names it)."""


@dataclass
class RunView:
    """One run directory as compare, runs and report read it."""

    path: Path
    run_id: str
    status: str
    """PASSED/FAILED/INVALID/ABORTED from the record; ``running`` or ``no record`` without
    one; ``unreadable`` when record.json is not JSON."""
    record: RunRecord | None = None
    """The record (read leniently when another soaktop version wrote it: see ``problems``);
    None without one, or when it is damaged."""
    problems: list[str] = field(default_factory=list)
    """Why the record did not validate: missing fields, unknown fields, bad values."""
    started: float = 0.0
    """Epoch seconds the run started (record ``started_at``, else config.json's mtime)."""
    fields: frozenset[str] = frozenset()
    """The record's own top-level keys (validation fills defaults for the ones it lacks:
    this says which ones an older soaktop did not write)."""

    @property
    def valid(self) -> bool:
        """Only PASSED and FAILED runs measured what they meant to."""
        return valid_status(self.status)

    @property
    def label(self) -> str:
        """The status as every output labels it: ``INVALID + FAILED`` when an invalid run
        also failed as a server attempt (:mod:`soak.record.status_label`)."""
        reasons = self.record.reasons if self.record is not None else []
        return label_of(self.status, (r.effect for r in reasons))

    def flag(self, text: str) -> str:
        """A figure of this run as shown: `` (invalid)`` after it unless the run is valid."""
        return flagged(self.status, text)


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding a record, a config or a runner PID."""
    return path.is_dir() and any((path / f).exists() for f in RUN_FILES)


def read_run(path: Path) -> RunView:
    """Read one run directory; raises :class:`NotARunDir` for anything else."""
    if not is_run_dir(path):
        raise NotARunDir(f"{path} is not a soaktop run directory (no record.json or config.json)")
    started = _mtime(path / "config.json") or _mtime(path)
    rec_path = path / "record.json"
    if not rec_path.exists():
        from soak.run.spawn import AttachedRunner  # psutil only when a run has no record

        status = "running" if AttachedRunner(path).alive() else "no record"
        return RunView(path, path.name, status, started=started)
    try:
        raw = orjson.loads(rec_path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        return RunView(path, path.name, "unreadable", problems=[f"record.json: {e}"])
    if not isinstance(raw, dict):
        return RunView(path, path.name, "unreadable", problems=["record.json is not an object"])
    # A record that does not say its verdict is no valid measurement (its status shows "?").
    record, error = read_leniently(RunRecord, raw, fills={("status",): Status.INVALID.value})
    problems = schema_problems(error) if error is not None else []
    if record is None:  # values of the wrong type: damage, not another soaktop version
        return RunView(path, path.name, "unreadable", problems=problems, started=started)
    status = record.status.value if "status" in raw else "?"
    view = RunView(
        path, record.run_id or path.name, status, record, problems, fields=frozenset(raw)
    )
    view.started = _iso_epoch(record.started_at) or started
    return view


def list_runs(folder: Path) -> list[RunView]:
    """Every run directory directly under ``folder``, newest first."""
    views = [read_run(p) for p in folder.iterdir() if is_run_dir(p)]
    return sorted(views, key=lambda v: (v.started, v.run_id), reverse=True)


def schema_problems(e: ValidationError) -> list[str]:
    """One line per validation error: ``missing field load.elapsed_s`` and the like."""
    out = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(record)"
        if err["type"] == "missing":
            out.append(f"missing field {where}")
        elif err["type"] == "extra_forbidden":
            out.append(f"field {where} is not in this soaktop's record schema")
        else:
            out.append(f"field {where}: {err['msg']}")
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _iso_epoch(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None
