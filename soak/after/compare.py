"""``soaktop compare`` and ``soaktop runs``: finished runs side by side, and a run folder listed.

``compare`` reproduces the seed-000 table: one column per run, the measurements as rows
(completed requests, load failures, elapsed including drain, output tokens/s, P99 TTFT and
E2E, each gate before/after, the whole-run verdict). Each column is headed by the run's
name and the recipe facts it differs in (``baseline · 32 slots/replica · 95% GPU memory``:
:mod:`soak.after.compare_headers`); every other difference, a "same recipe" line when
there is none, and each run's record caveats are listed under the table. Records of
schema 1.2 add "Drift first → last" (and the text output each run's drift and leak table
below: :mod:`soak.after.endurance_table`). INVALID and ABORTED runs keep their own columns
with every figure flagged: a figure from a run that did not measure what it meant to is
never presented as if it had, and an invalid run that also failed as a server attempt
says both (:mod:`soak.record.status_label`).

Run directories are read by :mod:`soak.after.run_view` (leniently, naming what another
soaktop version's record lacks or adds); its names are importable from here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from soak.after.compare_headers import Caveats, Headers, build_headers, run_caveats
from soak.after.endurance_table import drift_cell, endurance_text, has_timeline
from soak.after.record_view import config_value, memory_target
from soak.after.run_view import RUN_FILES as RUN_FILES
from soak.after.run_view import NotARunDir as NotARunDir
from soak.after.run_view import RunView as RunView
from soak.after.run_view import is_run_dir as is_run_dir
from soak.after.run_view import list_runs as list_runs
from soak.after.run_view import read_run as read_run
from soak.after.run_view import schema_problems as schema_problems
from soak.record.models import Reason
from soak.safe_text import safe_line

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
    """``Passed recorded checks``, ``Failed post-load JSON check``, ``Invalid: ...``; an
    invalid (or aborted) run that also failed as a server attempt says both, as seed 000
    does: ``Invalid as a load measurement (…) and failed as a server attempt (…)``."""
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
    more = f" (+{len(mine) - 1} more)" if len(mine) > 1 else ""
    if view.status == "FAILED":
        return _failed_words(mine[0]) + more
    why = _short(": ".join(mine[0].message.split(": ")[:2]))
    failed = [r for r in view.record.reasons if r.effect == "failed"]
    if not failed:
        return f"{view.status.capitalize()}: {why}{more}"
    what = "Invalid as a load measurement" if view.status == "INVALID" else "Aborted"
    server = _failed_words(failed[0]).removeprefix("Failed").lstrip(": ")
    also = f", +{len(failed) - 1} more" if len(failed) > 1 else ""
    return f"{what} ({why}{more}) and failed as a server attempt ({server}{also})"


def _failed_words(reason: Reason) -> str:
    """A ``failed``-effect reason in the seed's words."""
    msg, code = reason.message, reason.code
    if code == "gate_failed" and (m := _GATE_RE.match(msg)):
        return f"Failed {_PHASE_WORDS[m.group(1)]} {suite_title(m.group(2))} check"
    if code == "load_failures":  # "176 of 456 load requests failed: 64 connect_error, ..."
        return f"Failed load-phase requests ({msg.split(' load requests')[0]} failed)"
    if code == "before_gates_failed":
        return "Failed pre-load checks (no load run)"
    # "endpoint 1 log: CUDA illegal memory access at 17 s: <the log line>"
    return f"Failed: {_short(': '.join(msg.split(': ')[:2]))}"


# --- compare -----------------------------------------------------------------------

IGNORED_CONFIG = frozenset(
    {"out", "endpoints", "server_log", "server_log_cmd", "dcgm", "headless", "interval_s"}
    | {"metrics_port", "metrics_host"}  # where the live figures were served, not the test
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
    arrival = config_value(rec, "arrival")
    open_loop = arrival not in (None, "closed")  # a rate, not a concurrency
    return {
        "concurrency": None
        if open_loop
        else config_value(rec, "concurrency")
        or (load.requested_concurrency if load is not None else None),
        **({"arrival": f"{arrival} {config_value(rec, 'rate')} req/s"} if open_loop else {}),
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
    if conf.get("arrival"):
        parts.append(conf["arrival"])
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
    headers: Headers
    """Each column's header and the differences it leaves to the lines under the table."""
    caveats: Caveats
    """Each run's record caveats, the shared ones once."""

    @property
    def header(self) -> list[str]:
        """The table's header row: ``Measurement`` and each run's column header."""
        return ["Measurement", *self.headers.headers]


def _reasons(view: RunView) -> list[Reason]:
    return view.record.reasons if view.record is not None else []


def _flag(view: RunView, text: str) -> str:
    """A figure of a run that is not a valid measurement says so in its cell."""
    return view.flag(text)


def _figure_rows(views: list[RunView], figs: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
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
    return rows + _open_loop_rows(views)


def _open_loop_rows(views: list[RunView]) -> list[list[str]]:
    """Offered vs achieved rate and lateness, only when a run is open loop (a closed-loop
    comparison keeps its table as it was)."""
    loads = [v.record.load if v.record is not None else None for v in views]
    if not any(ld is not None and ld.offered_rate is not None for ld in loads):
        return []
    rate, late = ["Offered → achieved req/s"], ["P99 lateness (sent − intended)"]
    for v, ld in zip(views, loads, strict=True):
        if ld is None or ld.offered_rate is None:
            rate.append("closed loop")
            late.append("—")
            continue
        got = "—" if ld.achieved_rate is None else f"{ld.achieved_rate:,.1f}"
        rate.append(_flag(v, f"{ld.offered_rate:,.1f} → {got}"))
        p99 = ld.lateness_s.p99
        late.append(_flag(v, "—" if p99 is None else f"{p99 * 1e3:.1f} ms"))
    return [rate, late]


def _gate_rows(views: list[RunView], gates: list[dict[str, dict[str, str]]]) -> list[list[str]]:
    rows = []
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
    return rows


def compare(views: list[RunView]) -> Comparison:
    """The seed-000 table for these runs, in the order given."""
    diffs = config_differences(views)
    confs = [configuration(v) for v in views]
    heads = build_headers(views, confs, diffs)
    # Labels head the columns: the run ids stay in the table, first.
    rows = [["Run", *(v.run_id for v in views)]] if heads.by_label else []
    rows.append(["Configuration", *(_config_text(c) for c in confs)])
    rows += [
        [f"config {k}", *(_val(x) for x in vals)]
        for k, vals in diffs.items()
        if k not in ("concurrency", "replicas")  # already in the configuration row
    ]
    figs = [figures(v) for v in views]
    rows += _figure_rows(views, figs)
    gates = [gate_cells(v) for v in views]
    rows += _gate_rows(views, gates)
    verdicts = [verdict_words(v) for v in views]
    rows.append(["Whole-run verdict", *verdicts])
    data = [
        {
            "run_id": v.run_id,
            "name": name,
            "header": head,
            "path": str(v.path),
            "status": v.status,
            "status_label": v.label,
            "valid": v.valid,
            "problems": v.problems,
            "configuration": c,
            "recipe": facts,
            "figures": f,
            "gates": g,
            "verdict": w,
            "reasons": [r.model_dump(mode="json") for r in _reasons(v)],
            "caveats": [k.model_dump(mode="json") for k in v.record.caveats] if v.record else [],
            "drift": drift_cell(v.record) if has_timeline(v.record, v.fields) else None,
            "endurance": _endurance_json(v),
        }
        for v, name, head, facts, c, f, g, w in zip(
            views,
            heads.names,
            heads.headers,
            heads.facts,
            confs,
            figs,
            gates,
            verdicts,
            strict=True,
        )
    ]
    return Comparison(views, rows, diffs, data, heads, run_caveats(views))


def _endurance_json(view: RunView) -> dict[str, Any] | None:
    e = view.record.endurance if view.record is not None else None
    return None if e is None else e.model_dump(mode="json")


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """``--json``: runs with their figures, the column headers, every difference they do
    not name, the caveats, the config differences and the table rows."""
    return {
        "runs": cmp.data,
        **cmp.headers.json(),
        "caveats": cmp.caveats.json(cmp.headers.names),
        "config_differences": cmp.differences,
        "header": cmp.header,
        "rows": cmp.rows,
    }


def comparison_notes(cmp: Comparison, invalid_hint: str = "") -> list[str]:
    """What the table cannot show: runs that are not valid measurements (``invalid_hint``
    says how the page marks them) and records that did not read cleanly."""
    out = []
    for v in cmp.runs:
        if not v.valid:
            out.append(
                f"{v.run_id}: {v.label} — its figures are not a valid measurement "
                f"and are not comparable with the others{invalid_hint}"
            )
        out += [f"{v.run_id}: record {p}" for p in v.problems]
    return out


def under_table(cmp: Comparison) -> list[tuple[str, list[str]]]:
    """What is listed under the table, as (heading, items): every difference the headers
    do not name (or that the recipes are the same), then the caveats per group."""
    heads, names = cmp.headers, cmp.headers.names
    out: list[tuple[str, list[str]]] = []
    if heads.others:
        out.append(("Other differences", [d.text(names) for d in heads.others]))
    if heads.same_recipe:
        out.append(("Same recipe", [heads.same_recipe]))
    out += [(f"Caveats, {who}", items) for who, items in cmp.caveats.lines(names)]
    return out


def render_markdown(cmp: Comparison) -> str:
    """The table as Markdown, exactly the seed's shape (``| Measurement | run | run |``),
    then the differences and caveats under it."""

    def cell(s: str) -> str:
        return safe_line(s).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in cmp.header) + " |"]
    lines.append("|" + "---|" * len(cmp.header))
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in cmp.rows]
    for heading, items in under_table(cmp):
        lines += ["", f"{safe_line(heading)}:", *(f"- {safe_line(i)}" for i in items)]
    notes = comparison_notes(cmp)
    lines += ["", *(f"- {safe_line(n)}" for n in notes)] if notes else []
    return "\n".join(lines) + "\n"


def render_text(cmp: Comparison) -> str:
    """The table as aligned plain text, one column per run, then what is under it."""
    # Cells quote records (run ids, reasons): escapes shown, before the widths are taken.
    table = [[safe_line(c) for c in r] for r in (cmp.header, *cmp.rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(cmp.header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    below = under_table(cmp)
    lines += [""] if below else []
    for heading, items in below:
        if len(items) == 1:
            lines.append(f"{safe_line(heading)}: {safe_line(items[0])}")
        else:
            lines += [f"{safe_line(heading)}:", *(f"  - {safe_line(i)}" for i in items)]
    lines += [f"note: {safe_line(n)}" for n in comparison_notes(cmp)]
    if any(has_timeline(v.record, v.fields) for v in cmp.runs):  # each run's drift and leaks
        for v in cmp.runs:
            lines += ["", *endurance_text(v.run_id, v.record)]
    return "\n".join(lines) + "\n"


# --- runs ------------------------------------------------------------------------------


def run_line(view: RunView) -> dict[str, Any]:
    """One row of ``soaktop runs``: figures as numbers, ``figures_valid`` and the
    ``status_label`` saying whether they are a valid measurement."""
    f = figures(view)
    reasons = _reasons(view)
    first = reasons[0].message if reasons else (view.problems[0] if view.problems else None)
    return {
        "run_id": view.run_id,
        "status": view.status,
        "status_label": view.label,
        "figures_valid": view.valid,
        "completed": f["completed"],
        "output_tokens_per_s": f["output_tokens_per_s"],
        "p99_ttft_s": f["p99_ttft_s"],
        "first_reason": first,
        "path": str(view.path),
    }


def render_runs(views: list[RunView], width: int = 160) -> str:
    """``soaktop runs``: run id, status label, completed, output tok/s and p99 TTFT (both
    flagged when the run is not a valid measurement), first reason."""
    rows = [["RUN", "STATUS", "COMPLETED", "OUT TOK/S", "P99 TTFT", "FIRST REASON"]]
    for v in views:
        ln = run_line(v)
        tok, ttft = ln["output_tokens_per_s"], ln["p99_ttft_s"]
        rows.append(
            [
                ln["run_id"],
                ln["status_label"],
                "—" if ln["completed"] is None else f"{ln['completed']:,}",
                v.flag("—" if tok is None else f"{tok:,.1f}"),
                v.flag("—" if ttft is None else f"{ttft:.3f} s"),
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
