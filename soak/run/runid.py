"""Run ids and run directories: ``<model>__<label>__<engine>__<purpose>__MMDD-HHMMSS``."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path


def _part(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"


def make_run_id(model: str, label: str, engine: str, purpose: str, when: datetime) -> str:
    """E.g. ``tiny__baseline-s32__vllm__reliability__1129-231500`` (UTC time)."""
    stamp = when.strftime("%m%d-%H%M%S")
    return "__".join((_part(model), _part(label), _part(engine), _part(purpose), stamp))


def create_run_dir(out: Path, run_id: str) -> tuple[Path, str]:
    """Create a new, empty run directory; never reuse one (a suffix keeps both)."""
    out.mkdir(parents=True, exist_ok=True)
    candidate, n = run_id, 1
    while True:
        path = out / candidate
        try:
            path.mkdir()
        except FileExistsError:
            n += 1
            candidate = f"{run_id}-{n}"
            continue
        return path, candidate
