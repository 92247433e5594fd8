"""The record's tables as HTML: verdict and reasons, load summary, gates, thresholds,
reconciliation, faults, engines, identity.

Every value passes through :func:`esc` (``html.escape``) on its way into the page: reasons,
fault details and probe failures quote server output, and a ``<script>`` in a log line
must reach the reader as text. Fields a record lacks render as "—" or a short "not in
this record" line, so records from older soaktop versions still make a full page.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from soak.record.faults import faults_from_events, when
from soak.record.journal import read_jsonl
from soak.safe_text import safe_text


def esc(v: Any) -> str:
    """A value as HTML text (None as an em dash)."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.1f}"
    if isinstance(v, dict | list):
        import json

        return html.escape(safe_text(json.dumps(v, ensure_ascii=False, default=str)))
    # safe_text: a terminal escape or a bidi override in a server's words is shown as
    # ``\x1b`` / ``\u202e`` (visible in the page, inert when the file is cat-ed).
    return html.escape(safe_text(str(v)), quote=True)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    """A table whose cells are escaped (``header`` is soaktop's own, escaped too)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    if not body:
        return '<p class="none">none</p>'
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def section(title: str, body: str, anchor: str) -> str:
    """A titled section of the page."""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>'


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def verdict(rec: dict[str, Any]) -> str:
    """The status and every reason, strongest first (as the record orders them)."""
    rows = [(r.get("effect"), r.get("code"), r.get("message")) for r in rec.get("reasons") or []]
    return table(("effect", "code", "reason"), rows, "reasons")


def load_summary(rec: dict[str, Any]) -> str:
    """The load phase: counts, timing, throughput, then the exact latency percentiles."""
    ld = rec.get("load")
    if not isinstance(ld, dict):
        return '<p class="none">no load phase in this record</p>'
    fails = ", ".join(f"{n} {c}" for c, n in (ld.get("failures_by_class") or {}).items())
    facts = [
        ("requested concurrency", ld.get("requested_concurrency")),
        ("workers started", ld.get("workers_started")),
        ("barrier released", ld.get("barrier_released_at") or ld.get("barrier_released")),
        ("issued", ld.get("issued")),
        ("completed", ld.get("completed")),
        ("failed", f"{ld.get('failed')} ({fails})" if fails else ld.get("failed")),
        ("cancelled", ld.get("cancelled")),
        ("issue window", _s(ld.get("issue_s"))),
        ("drain", _s(ld.get("drain_s"))),
        ("elapsed including drain", _s(ld.get("elapsed_s"))),
        ("stop reason", ld.get("stop_reason")),
        ("output tokens", ld.get("output_tokens")),
        ("output tokens/s (drain included)", ld.get("output_tokens_per_s")),
        ("output tokens/s (issue window)", ld.get("output_tokens_per_s_issue_window")),
        ("requests/s", ld.get("requests_per_s")),
        ("mean input tokens", ld.get("input_tokens_mean")),
        ("requests without usage", ld.get("usage_missing")),
        ("back-offs", ld.get("backoffs")),
    ]
    lat = []
    for key, label in (
        ("ttft_s", "TTFT"),
        ("e2e_s", "E2E"),
        ("itl_s", "ITL"),
        ("tpot_s", "TPOT"),
        ("ttfb_s", "TTFB"),
        ("first_content_s", "first content"),
    ):
        st = ld.get(key)
        if isinstance(st, dict):
            lat.append(
                [label] + [st.get(q) for q in ("p50", "p90", "p99", "max", "mean", "n", "method")]
            )
    return (
        table(("measure", "value"), facts, "facts")
        + "<h3>Latency (seconds, exact over every request)</h3>"
        + table(("", "p50", "p90", "p99", "max", "mean", "n", "method"), lat, "numbers")
    )


def _s(v: Any) -> str | None:
    return None if not isinstance(v, int | float) else f"{v:,.2f} s"


def gates(rec: dict[str, Any]) -> str:
    """Each phase and suite: passed/total, then every failed task with its reason."""
    rows, failures = [], []
    for phase, suites in (rec.get("gates") or {}).items():
        for suite, g in (suites or {}).items():
            if not isinstance(g, dict):
                continue
            rows.append((phase, suite, f"{g.get('passed')}/{g.get('total')}", g.get("not_run")))
            for f in g.get("failures") or []:
                f = f if isinstance(f, dict) else {"reason": f}
                failures.append((phase, suite, f.get("label"), f.get("outcome"), f.get("reason")))
    if not rows:
        return '<p class="none">no gates ran</p>'
    out = table(("phase", "suite", "passed", "not run"), rows, "numbers")
    if failures:
        out += "<h3>Failed tasks</h3>" + table(
            ("phase", "suite", "task", "outcome", "reason"), failures
        )
    return out


def thresholds(rec: dict[str, Any]) -> str:
    """Every threshold's final state with the fields the record gives it."""
    items = [t for t in rec.get("thresholds") or [] if isinstance(t, dict)]
    if not items:
        return '<p class="none">no thresholds configured</p>'
    keys = list(dict.fromkeys(k for t in items for k in t))
    return table(keys, ([t.get(k) for k in keys] for t in items))


_COUNTERS = ("requests", "prompt_tokens", "generation_tokens")


def reconciliation(rec: dict[str, Any]) -> str:
    """Client vs server counters, one row per window and counter (both record formats:
    per-counter ``{status, client, server, difference}``, and the older per-window
    ``client``/``server`` dicts)."""
    rc = rec.get("reconciliation")
    if not isinstance(rc, dict) or not rc:
        return '<p class="none">no reconciliation in this record</p>'
    rows = []
    for window, res in rc.items():
        if not isinstance(res, dict):
            continue
        for name in _COUNTERS:
            item = res.get(name)
            if isinstance(item, dict):  # the current format
                status, client, server = item.get("status"), item.get("client"), item.get("server")
                diff, why = item.get("difference"), item.get("why")
            else:  # older records: one client and one server dict per window
                client = _get(res, "client", name)
                server = _get(res, "server", name)
                diff = None if client is None or server is None else server - client
                why = res.get("unavailable")
                m = res.get("matched")
                status = "matched" if m is True else "mismatched" if m is False else "unavailable"
            rows.append((window, name.replace("_", " "), status, client, server, diff, why))
    overall = rc.get("matched")
    verdict = "yes" if overall is True else "no" if overall is False else "nothing was compared"
    head = f"<p>every window that could be compared matched: <b>{esc(verdict)}</b></p>"
    return head + table(
        ("window", "counter", "status", "client", "server", "difference", "why"), rows, "numbers"
    )


def faults(rec: dict[str, Any], fields: frozenset[str], run_dir: Path) -> str:
    """The record's ``faults[]``; for a record older than that field, recomputed from
    events.jsonl the same way the runner does (and the page says so)."""
    note = ""
    items = rec.get("faults")
    if "faults" not in fields or not isinstance(items, list):
        load_start = _get(rec, "load", "issue_start_s")
        items = faults_from_events(read_jsonl(run_dir / "events.jsonl"), load_start)
        note = (
            '<p class="note">this record predates <code>faults</code>: the list below is '
            "recomputed from events.jsonl</p>"
        )
    rows = []
    for f in items:
        if not isinstance(f, dict):
            continue
        rel = f.get("time_s")
        at = when(rel, 0.0)[3:] if isinstance(rel, int | float) else _s(f.get("t_s"))
        where = f.get("gpu", f.get("replica", f.get("endpoint")))
        rows.append((at, f.get("source"), f.get("kind"), f.get("severity"), where, f.get("detail")))
    return note + table(("when", "source", "kind", "severity", "GPU/replica", "detail"), rows)


def engines(rec: dict[str, Any]) -> str:
    """What each endpoint's /metrics said during the load (``telemetry.engines``)."""
    items = [e for e in _get(rec, "telemetry", "engines") or [] if isinstance(e, dict)]
    if not items:
        return '<p class="none">no engine metrics</p>'
    keys = [k for k in dict.fromkeys(k for e in items for k in e) if not k.startswith("server_")]
    out = table(keys, ([e.get(k) for k in keys] for e in items), "numbers")
    lat = []
    for e in items:
        for key in ("server_ttft_s", "server_e2e_s", "server_queue_s"):
            st = e.get(key)
            if isinstance(st, dict):
                lat.append([e.get("endpoint"), key[7:-2]] + [st.get(q) for q in ("p50", "p99")])
    if lat:
        out += "<h3>Server-side latency (histogram estimates)</h3>" + table(
            ("endpoint", "measure", "p50 s", "p99 s"), lat, "numbers"
        )
    return out


def identity(rec: dict[str, Any]) -> str:
    """Model, engine, endpoints with version, KV token slots and memory target."""
    ident = rec.get("identity")
    if not isinstance(ident, dict):
        return '<p class="none">no identity in this record</p>'
    rows = [
        (
            e.get("url"),
            e.get("engine"),
            e.get("version"),
            e.get("reachable"),
            e.get("token_slots"),
            _get(e, "cache_config", "gpu_memory_utilization"),
        )
        for e in ident.get("endpoints") or []
        if isinstance(e, dict)
    ]
    facts = [
        ("model", ident.get("model")),
        ("engine", ident.get("engine")),
        ("soaktop", ident.get("soaktop_version")),
        ("prompt pool", ident.get("prompt_pool")),
        ("GPUs", len(ident.get("gpus") or [])),
    ]
    return table(("", ""), facts, "facts") + table(
        ("endpoint", "engine", "version", "reachable", "KV token slots", "GPU memory target"),
        rows,
    )


def config(rec: dict[str, Any]) -> str:
    """The full configuration, folded."""
    cfg = rec.get("config") or {}
    return (
        "<details><summary>configuration</summary>"
        + table(("key", "value"), sorted(cfg.items()), "facts")
        + "</details>"
    )
