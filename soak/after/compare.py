"""``soaktop compare`` and ``soaktop runs``: finished runs side by side, and a run folder listed.

``compare`` reproduces the seed-000 table: one column per run, the measurements as rows
(completed requests, load failures, elapsed including drain, output tokens/s, P99 TTFT and
E2E, each gate before/after, the whole-run verdict), headed by what differs in the runs'
configurations. Records of schema 1.2 add "Drift first → last" (and the text output each
run's drift and leak table below: :mod:`soak.after.endurance_table`). INVALID and ABORTED
runs keep their own columns with every figure flagged: a figure from a run that did not
measure what it meant to is never presented as if it had.

Records are read defensively (:func:`read_run`): a record written by an older or newer
soaktop, which lacks keys :class:`~soak.record.models.RunRecord` requires or has keys it does
not declare, is still read into the model (:func:`soak.after.record_view.read_leniently`), and
those keys are named in ``problems`` instead of crashing the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from soak.after.endurance_table import drift_cell, endurance_text, has_timeline
from soak.after.record_view import config_value, memory_target, read_leniently
from soak.record.models import Reason, RunRecord, Status
from soak.safe_text import safe_line

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
        return self.status in ("PASSED", "FAILED")


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


# --- the verdict in the seed's words ---------------------------------------------------

_PHASE_WORDS = {"before-load": "pre-load", "after-load": "post-load", "canary": "canary"}
_GATE_RE = re.compile(r"^(before-load|after-load|canary)\S*(?: \([^)]*\))? (\S+) \d+/\d+")


def suite_title(suite: str) -> str:
    """``json`` → ``JSON``, ``tools`` → ``Tools``: the seed's row labels."""
    return suite.upper() if suite.lower() == "json" else suite.capitalize()


def _short(text: str, n: int = 72) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def verdict_words(view: RunView) -> str:
    """``Passed recorded checks``, ``Failed post-load JSON check``, ``Invalid: ...``."""
    if view.record is None:
        return {"running": "Still running", "no record": "No record"}.get(
            view.status, f"No readable record ({view.status})"
        )
    if view.status == "PASSED":
        return "Passed recorded checks"
    effect = {"FAILED": "failed", "INVALID": "invalid", "ABORTED": "aborted"}.get(view.status)
    mine = [r for r in view.record.reasons if r.effect == effect]
    if effect is None or not mine:
        return f"{view.status.capitalize()} (no reason recorded)"
    first, more = mine[0], len(mine) - 1
    msg, code = first.message, first.code
    if view.status != "FAILED":
        words = f"{view.status.capitalize()}: {_short(': '.join(msg.split(': ')[:2]))}"
    elif code == "gate_failed" and (m := _GATE_RE.match(msg)):
        words = f"Failed {_PHASE_WORDS[m.group(1)]} {suite_title(m.group(2))} check"
    elif code == "load_failures":  # "176 of 456 load requests failed: 64 connect_error, ..."
        words = f"Failed load-phase requests ({msg.split(' load requests')[0]} failed)"
    elif code == "before_gates_failed":
        words = "Failed pre-load checks (no load run)"
    else:  # "endpoint 1 log: CUDA illegal memory access at 17 s: <the log line>"
        words = f"Failed: {_short(': '.join(msg.split(': ')[:2]))}"
    return words + (f" (+{more} more)" if more else "")


# --- compare -----------------------------------------------------------------------

IGNORED_CONFIG = frozenset(
    {"out", "endpoints", "server_log", "server_log_cmd", "dcgm", "headless", "interval_s"}
)
"""Config keys that say where a run wrote or read, not what it tested (demo ports and
temporary paths differ on every run); endpoints are compared by count (replicas)."""


def _config_items(view: RunView) -> dict[str, Any]:
    if view.record is None:
        return {}
    out = {k: v for k, v in view.record.config.items() if k not in IGNORED_CONFIG}
    if isinstance(endpoints := config_value(view.record, "endpoints"), list):
        out["replicas"] = len(endpoints)
    return out


def config_differences(views: list[RunView]) -> dict[str, list[Any]]:
    """Config keys whose values differ between the runs: key → one value per run.

    Only keys every run's config has are compared: a key an older soaktop did not write
    is a setting that did not exist then, not a difference in what was tested."""
    items = [_config_items(v) for v in views if v.record is not None]
    if len(items) < 2:
        return {}
    common = set.intersection(*(set(it) for it in items))
    diff = {}
    for k in sorted(common):
        vals = [it[k] for it in items]
        if any(v != vals[0] for v in vals):
            diff[k] = [_config_items(v).get(k) if v.record is not None else None for v in views]
    return diff


def configuration(view: RunView) -> dict[str, Any]:
    """What the seed's column headers say: client concurrency, replicas, KV token slots per
    replica and the GPU memory target, when the config and identity have them."""
    rec = view.record
    if rec is None:
        return {
            "concurrency": None,
            "replicas": None,
            "token_slots": [],
            "gpu_memory_utilization": [],
            "engine": None,
            "model": None,
        }
    ident, load = rec.identity, rec.load
    eps = ident.endpoints if ident is not None else []
    mem = [memory_target(e.cache_config) for e in eps]
    return {
        "concurrency": config_value(rec, "concurrency")
        or (load.requested_concurrency if load is not None else None),
        "replicas": len(eps) or len(config_value(rec, "endpoints") or []) or None,
        "token_slots": [e.token_slots for e in eps if e.token_slots is not None],
        "gpu_memory_utilization": sorted({str(m) for m in mem if m not in (None, "None")}),
        "engine": ident.engine if ident is not None else None,
        "model": (ident.model if ident is not None else None) or config_value(rec, "model"),
    }


def _config_text(conf: dict[str, Any]) -> str:
    parts = []
    if conf["concurrency"] is not None:
        parts.append(f"concurrency {conf['concurrency']}")
    if conf["replicas"]:
        parts.append(f"{conf['replicas']} replica{'s' if conf['replicas'] != 1 else ''}")
    if slots := sorted(set(conf["token_slots"])):
        parts.append(" / ".join(f"{s:,}" for s in slots) + " KV tokens/replica")
    if mem := conf["gpu_memory_utilization"]:
        parts.append(" / ".join(_pct(m) for m in mem) + " GPU memory")
    return " · ".join(parts) or "—"


def _pct(v: str) -> str:
    try:
        return f"{float(v) * 100:g}%"
    except ValueError:
        return v


def _val(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(_val(x) for x in v) or "[]"
    return "—" if v is None else str(v)


def figures(view: RunView) -> dict[str, Any]:
    """The seed's load figures (None where the run has none)."""
    load = view.record.load if view.record is not None else None
    if load is None:
        return dict.fromkeys(_FIGURE_KEYS)
    return {
        "completed": load.completed,
        "load_failures": load.failed,
        "elapsed_s": load.elapsed_s,
        "output_tokens_per_s": load.output_tokens_per_s,
        "p99_ttft_s": load.ttft_s.p99,
        "p99_e2e_s": load.e2e_s.p99,
    }


_FIGURE_KEYS = (
    "completed",
    "load_failures",
    "elapsed_s",
    "output_tokens_per_s",
    "p99_ttft_s",
    "p99_e2e_s",
)


def gate_cells(view: RunView) -> dict[str, dict[str, str]]:
    """``{suite: {phase: "24/24"}}`` from the record's gates."""
    out: dict[str, dict[str, str]] = {}
    for phase, suites in (view.record.gates if view.record is not None else {}).items():
        for suite, res in suites.items():
            out.setdefault(suite, {})[phase] = f"{res.passed}/{res.total}"
    return out


_FIGURE_ROWS = (
    ("Completed requests", "completed", "{:,}"),
    ("Load-phase request failures", "load_failures", "{:,}"),
    ("Elapsed including drain", "elapsed_s", "{:,.2f} s"),
    ("Aggregate output tokens/s", "output_tokens_per_s", "{:,.3f}"),
    ("P99 first-token latency", "p99_ttft_s", "{:.3f} s"),
    ("P99 whole-request latency", "p99_e2e_s", "{:.3f} s"),
)


@dataclass
class Comparison:
    """The table (``rows``: label then one cell per run) and its structured form."""

    runs: list[RunView]
    rows: list[list[str]]
    differences: dict[str, list[Any]]
    data: list[dict[str, Any]]


def _reasons(view: RunView) -> list[Reason]:
    return view.record.reasons if view.record is not None else []


def _flag(view: RunView, text: str) -> str:
    """A figure of a run that is not a valid measurement says so in its cell."""
    if text == "—" or view.valid:
        return text
    return f"{text} ({view.status.lower()})"


def compare(views: list[RunView]) -> Comparison:
    """The seed-000 table for these runs, in the order given."""
    diffs = config_differences(views)
    confs = [configuration(v) for v in views]
    rows = [["Configuration", *(_config_text(c) for c in confs)]]
    rows += [
        [f"config {k}", *(_val(x) for x in vals)]
        for k, vals in diffs.items()
        if k not in ("concurrency", "replicas")  # already in the configuration row
    ]
    figs = [figures(v) for v in views]
    for label, key, fmt in _FIGURE_ROWS:
        rows.append(
            [label]
            + [
                _flag(v, "—" if f[key] is None else fmt.format(f[key]))
                for v, f in zip(views, figs, strict=True)
            ]
        )
    if any(has_timeline(v.record, v.fields) for v in views):  # a 1.2 record: its timeline
        rows.append(["Drift first → last", *(_flag(v, drift_cell(v.record)) for v in views)])
    gates = [gate_cells(v) for v in views]
    for suite in sorted({s for g in gates for s in g}, key=lambda s: (s != "json", s)):
        cells = [g.get(suite, {}) for g in gates]
        rows.append(
            [f"{suite_title(suite)} before / after"]
            + [
                _flag(v, f"{c.get('before', '—')} / {c.get('after', '—')}") if c else "—"
                for v, c in zip(views, cells, strict=True)
            ]
        )
        if any("canary" in c for c in cells):
            rows.append(
                [f"{suite_title(suite)} canary"]
                + [_flag(v, c.get("canary", "—")) for v, c in zip(views, cells, strict=True)]
            )
    verdicts = [verdict_words(v) for v in views]
    rows.append(["Whole-run verdict", *verdicts])
    data = [
        {
            "run_id": v.run_id,
            "path": str(v.path),
            "status": v.status,
            "valid": v.valid,
            "problems": v.problems,
            "configuration": c,
            "figures": f,
            "gates": g,
            "verdict": w,
            "reasons": [r.model_dump(mode="json") for r in _reasons(v)],
            "drift": drift_cell(v.record) if has_timeline(v.record, v.fields) else None,
            "endurance": _endurance_json(v),
        }
        for v, c, f, g, w in zip(views, confs, figs, gates, verdicts, strict=True)
    ]
    return Comparison(views, rows, diffs, data)


def _endurance_json(view: RunView) -> dict[str, Any] | None:
    e = view.record.endurance if view.record is not None else None
    return None if e is None else e.model_dump(mode="json")


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """``--json``: runs with their figures, the config differences and the table rows."""
    return {
        "runs": cmp.data,
        "config_differences": cmp.differences,
        "header": ["Measurement", *(v.run_id for v in cmp.runs)],
        "rows": cmp.rows,
    }


def comparison_notes(cmp: Comparison, invalid_hint: str = "") -> list[str]:
    """What the table cannot show: runs that are not valid measurements (``invalid_hint``
    says how the page marks them) and records that did not read cleanly."""
    out = []
    for v in cmp.runs:
        if not v.valid:
            out.append(
                f"{v.run_id}: {v.status} — its figures are not a valid measurement "
                f"and are not comparable with the others{invalid_hint}"
            )
        out += [f"{v.run_id}: record {p}" for p in v.problems]
    return out


def render_markdown(cmp: Comparison) -> str:
    """The table as Markdown, exactly the seed's shape (``| Measurement | run | run |``)."""

    def cell(s: str) -> str:
        return safe_line(s).replace("|", "\\|")

    header = ["Measurement", *(v.run_id for v in cmp.runs)]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in cmp.rows]
    notes = comparison_notes(cmp)
    lines += ["", *(f"- {safe_line(n)}" for n in notes)] if notes else []
    return "\n".join(lines) + "\n"


def render_text(cmp: Comparison) -> str:
    """The table as aligned plain text, one column per run."""
    header = ["Measurement", *(v.run_id for v in cmp.runs)]
    # Cells quote records (run ids, reasons): escapes shown, before the widths are taken.
    table = [[safe_line(c) for c in r] for r in (header, *cmp.rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"note: {safe_line(n)}" for n in comparison_notes(cmp)]
    if any(has_timeline(v.record, v.fields) for v in cmp.runs):  # each run's drift and leaks
        for v in cmp.runs:
            lines += ["", *endurance_text(v.run_id, v.record)]
    return "\n".join(lines) + "\n"


# --- runs ------------------------------------------------------------------------------


def list_runs(folder: Path) -> list[RunView]:
    """Every run directory directly under ``folder``, newest first."""
    views = [read_run(p) for p in folder.iterdir() if is_run_dir(p)]
    return sorted(views, key=lambda v: (v.started, v.run_id), reverse=True)


def run_line(view: RunView) -> dict[str, Any]:
    """One row of ``soaktop runs``."""
    f = figures(view)
    reasons = _reasons(view)
    first = reasons[0].message if reasons else (view.problems[0] if view.problems else None)
    return {
        "run_id": view.run_id,
        "status": view.status,
        "completed": f["completed"],
        "output_tokens_per_s": f["output_tokens_per_s"],
        "p99_ttft_s": f["p99_ttft_s"],
        "first_reason": first,
        "path": str(view.path),
    }


def render_runs(views: list[RunView], width: int = 160) -> str:
    """``soaktop runs``: run id, status, completed, output tok/s, p99 TTFT, first reason."""
    rows = [["RUN", "STATUS", "COMPLETED", "OUT TOK/S", "P99 TTFT", "FIRST REASON"]]
    for v in views:
        ln = run_line(v)
        rows.append(
            [
                ln["run_id"],
                ln["status"],
                "—" if ln["completed"] is None else f"{ln['completed']:,}",
                "—" if ln["output_tokens_per_s"] is None else f"{ln['output_tokens_per_s']:,.1f}",
                "—" if ln["p99_ttft_s"] is None else f"{ln['p99_ttft_s']:.3f} s",
                str(ln["first_reason"] or ""),
            ]
        )
        rows[-1] = [safe_line(c) for c in rows[-1]]  # the record's words: escapes shown
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for row in rows:
        head = "  ".join(c.ljust(w) for c, w in zip(row[:5], widths, strict=True))
        lines.append((head + "  " + _short(row[5], max(20, width - len(head) - 2))).rstrip())
    return "\n".join(lines) + "\n"
