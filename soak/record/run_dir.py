"""Open a run directory for reading, or say in one sentence what is damaged.

Every command that reads a run directory (``view``, ``attach``, ``verify``, ``recover``,
``report``, ``compare``, ``runs``, ``decide``) checks it here first, so a missing
directory, a folder that is not a run, a ``record.json`` that is truncated, not JSON, of
the wrong shape or missing fields, or a damaged ``config.json`` is named the same way
everywhere, and the command exits 2 (``EXIT_USAGE``: the input cannot be used) without a
traceback. Journals are read leniently (a torn last line is what a killed runner leaves);
:func:`journal_problems` names lines that are not JSON objects for the commands that
recompute from them.

Values from the files are shown with ``repr`` (control characters escaped): a record is
data, never terminal control.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from soak.record.journal_scan import JournalScan
from soak.record.lenient import VERSION_DIFFERENCES
from soak.record.models import RunRecord

RUN_FILES = ("record.json", "config.json", "runner.pid")
"""A directory holding any of these is a soaktop run directory."""
JOURNALS = (
    "requests.jsonl",
    "events.jsonl",
    "telemetry.jsonl",
    "snapshots.jsonl",
    "probes.jsonl",
)


class RunDirError(ValueError):
    """The run directory is missing, is not one, or is damaged; ``str()`` says which."""


def check_run_dir(path: Path) -> None:
    """Raise :class:`RunDirError` unless ``path`` is a directory holding a run's files."""
    try:
        if not path.exists():
            raise RunDirError(f"{path} does not exist")
        if not path.is_dir():
            raise RunDirError(f"{path} is not a directory (give a run directory)")
        if not any((path / f).exists() for f in RUN_FILES):
            raise RunDirError(
                f"{path} is not a soaktop run directory (no record.json, config.json or runner.pid)"
            )
    except OSError as e:
        raise RunDirError(f"{path} cannot be read: {e.strerror or e}") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold one object; :class:`RunDirError` names what is wrong."""
    name = f"{path.parent}/{path.name}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunDirError(f"{name} is missing") from None
    except IsADirectoryError:
        raise RunDirError(f"{name} is damaged: a directory, not a file") from None
    except OSError as e:
        raise RunDirError(f"{name} cannot be read: {e.strerror or e}") from None
    if not data.strip():
        raise RunDirError(f"{name} is damaged: the file is empty")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        at = f" at byte {e.pos}" if e.pos is not None else ""
        raise RunDirError(f"{name} is damaged: invalid JSON{at} ({e.msg})") from None
    if not isinstance(obj, dict):
        kind = {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
            type(obj), "a bare value"
        )
        raise RunDirError(f"{name} is damaged: it holds {kind}, not a JSON object")
    return obj


def record_problems(e: ValidationError, limit: int = 3) -> str:
    """The first few schema problems of a record, in words (``missing field load.issued``)."""
    out = []
    for err in e.errors():
        where = (
            ".".join(
                repr(p) if isinstance(p, str) and not p.isidentifier() else str(p)
                for p in err["loc"]
            )
            or "(record)"
        )
        if err["type"] == "missing":
            out.append(f"missing field {where}")
        elif err["type"] == "extra_forbidden":
            out.append(f"unknown field {where}")
        else:
            out.append(f"field {where}: {err['msg']}")
    more = len(out) - limit
    text = "; ".join(out[:limit])
    return text + (f"; and {more} more" if more > 0 else "")


def load_run_record(run_dir: Path) -> RunRecord:
    """The validated record of a finished run, or :class:`RunDirError` saying why not."""
    check_run_dir(run_dir)
    if not (run_dir / "record.json").exists():
        raise RunDirError(
            f"{run_dir} has no record.json (still running? soaktop attach {run_dir}; "
            f"a runner that died? soaktop recover {run_dir})"
        )
    raw = read_json_object(run_dir / "record.json")
    try:
        return RunRecord.model_validate(raw)
    except ValidationError as e:
        raise RunDirError(
            f"{run_dir}/record.json is damaged: it does not match the record schema "
            f"({record_problems(e)})"
        ) from None


def record_problem(run_dir: Path) -> str | None:
    """Why the run directory's record cannot be used, when it has one (None: it has
    none yet, or it is sound). For the commands that also show a run without a record."""
    check_run_dir(run_dir)
    if not (run_dir / "record.json").exists():
        return None
    try:
        load_run_record(run_dir)
    except RunDirError as e:
        return str(e)
    return None


def load_run_config(run_dir: Path) -> dict[str, Any]:
    """``config.json`` as written by the runner (a JSON object), or :class:`RunDirError`."""
    check_run_dir(run_dir)
    if not (run_dir / "config.json").exists():
        raise RunDirError(f"{run_dir} has no config.json: it is not a complete run directory")
    return read_json_object(run_dir / "config.json")


def journal_problems(run_dir: Path, names: tuple[str, ...] = JOURNALS) -> list[str]:
    """Lines of the journals that are not JSON objects (garbage, binary, the wrong
    shape), by file and line number. A torn last line (no newline: a runner killed
    mid-write) is said too, as what it is. (One journal read for its figures too:
    :class:`~soak.record.journal_scan.JournalScan`, whose words these are.)"""
    out = []
    for name in names:
        scan = JournalScan(name)
        try:
            for _ in scan.lines(run_dir / name):
                pass
        except OSError as e:
            out.append(f"{name} cannot be read: {e.strerror or e}")
            continue
        out += scan.problems()
    return out


def unreadable_record(run_dir: Path) -> str | None:
    """Why ``record.json`` cannot be read even as another version's record, when it
    exists (None otherwise).

    ``compare``, ``runs`` and ``report`` read a record whose only problems are missing or
    unknown fields through its models, leniently (another soaktop version wrote it:
    :mod:`soak.record.lenient`), and name them; a record that is not a JSON object, or
    holds values of the wrong type, is damage they refuse."""
    if not (run_dir / "record.json").exists():
        return None
    try:
        raw = read_json_object(run_dir / "record.json")
    except RunDirError as e:
        return str(e)
    try:
        RunRecord.model_validate(raw)
    except ValidationError as e:
        wrong = [err for err in e.errors() if err["type"] not in VERSION_DIFFERENCES]
        if wrong:
            return (
                f"{run_dir}/record.json is damaged: values of the wrong type ({record_problems(e)})"
            )
    return None
