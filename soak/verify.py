"""``soaktop verify RUN_DIR``: does the record agree with the journals it was made from?

Checks each journal's sha256 against ``record.files`` and recomputes the load summary
from ``requests.jsonl`` with the same function the runner used. Exit 0 when everything
agrees, 1 with the list of differences otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from soak.journal import sha256_file
from soak.record import load_record
from soak.summary import LoadTiming, summarize_load


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff(f"{path}.{k}", a.get(k), b.get(k), out)
    elif isinstance(a, float) and isinstance(b, float):
        if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: record {a!r}, journal {b!r}")
    elif a != b:
        out.append(f"{path}: record {a!r}, journal {b!r}")


def verify_run(run_dir: Path) -> list[str]:
    """Differences between the record and the journals (empty: they agree)."""
    try:
        rec = load_record(run_dir)
    except FileNotFoundError:
        return [f"{run_dir}: no record.json (a runner that died? try: soaktop recover {run_dir})"]
    except ValidationError as e:
        return [f"record.json does not match the schema: {e}"]
    problems: list[str] = []
    for name, digest in rec.files.items():
        path = run_dir / name
        if not path.exists():
            problems.append(f"{name}: missing (record has sha256 {digest[:12]}…)")
        elif (actual := sha256_file(path)) != digest:
            problems.append(
                f"{name}: sha256 {actual[:12]}… differs from the record's {digest[:12]}…"
            )
    if rec.load is not None:
        method = rec.config.get("percentile_method", "nearest-rank")
        again = summarize_load(
            run_dir / "requests.jsonl", LoadTiming.from_summary(rec.load), method
        )
        _diff("load", rec.load.model_dump(mode="json"), again.model_dump(mode="json"), problems)
    return problems
