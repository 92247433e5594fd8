"""The record's tables as HTML: verdict and reasons, load summary, gates, thresholds,
reconciliation, faults, engines, identity.

Every value passes through :func:`esc` (``html.escape``) on its way into the page: reasons,
fault details and probe failures quote server output, and a ``<script>`` in a log line
must reach the reader as text. Fields a record lacks render as "—" or a short "not in
this record" line, so records from older soaktop versions still make a full page.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from soak.after.record_view import memory_target
from soak.record.faults import faults_from_events, when
from soak.record.journal import read_jsonl
from soak.record.models import RunRecord
from soak.record.sections import CounterComparison, Fault, ReconciledWindow, Reconciliation
from soak.record.status_label import flagged, status_label, valid_status
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


def verdict(rec: RunRecord) -> str:
    """The status and every reason, strongest first (as the record orders them)."""
    rows = [(r.effect, r.code, r.message) for r in rec.reasons]
    return table(("effect", "code", "reason"), rows, "reasons")


def caveats(rec: RunRecord) -> str:
    """What the run can and cannot show (``record.caveats``), each with its code."""
    if "caveats" not in rec.model_fields_set:
        return (
            '<p class="none">this record predates <code>caveats</code> (schema 1.3): '
            "what follows from how the run was made is not written down</p>"
        )
    if not rec.caveats:
        return '<p class="none">none: no load was measured</p>'
    items = "".join(
        f'<li>{esc(c.message)} <span class="note">({esc(c.code)})</span></li>' for c in rec.caveats
    )
    return f'<ul class="caveats">{items}</ul>'


def _figure(status: str, v: Any) -> Any:
    """A throughput or latency figure as the page shows it: flagged ``(invalid)`` /
    ``(aborted)`` when the run is not a valid measurement (``soak.record.status_label``)."""
    if v is None or valid_status(status) or not isinstance(v, int | float):
        return v
    return flagged(status, esc(v))


def load_summary(rec: RunRecord) -> str:
    """The load phase: counts, timing, throughput, then the exact latency percentiles
    (throughput and latency flagged when the run is not a valid measurement)."""
    ld = rec.load
    if ld is None:
        return '<p class="none">no load phase in this record</p>'
    status = rec.status.value
    fails = ", ".join(f"{n} {c}" for c, n in ld.failures_by_class.items())
    facts = [
        ("requested concurrency", ld.requested_concurrency),
        ("workers started", ld.workers_started),
        ("barrier released", ld.barrier_released_at or ld.barrier_released),
        ("issued", ld.issued),
        ("completed", ld.completed),
        ("failed", f"{ld.failed} ({fails})" if fails else ld.failed),
        ("cancelled", ld.cancelled),
        ("issue window", _s(ld.issue_s)),
        ("drain", _s(ld.drain_s)),
        ("elapsed including drain", _s(ld.elapsed_s)),
        ("stop reason", ld.stop_reason),
        ("output tokens", ld.output_tokens),
        ("output tokens/s (drain included)", _figure(status, ld.output_tokens_per_s)),
        ("output tokens/s (issue window)", _figure(status, ld.output_tokens_per_s_issue_window)),
        ("requests/s", _figure(status, ld.requests_per_s)),
        ("mean input tokens", ld.input_tokens_mean),
        ("requests without usage", ld.usage_missing),
        ("back-offs", ld.backoffs),
    ]
    latencies = (
        ("TTFT", ld.ttft_s),
        ("E2E", ld.e2e_s),
        ("ITL", ld.itl_s),
        ("TPOT", ld.tpot_s),
        ("TTFB", ld.ttfb_s),
        ("first content", ld.first_content_s),
    )
    lat = []
    for label, st in latencies:
        shown = [_figure(status, x) for x in (st.p50, st.p90, st.p99, st.max, st.mean)]
        lat.append([label, *shown, st.n, st.method])
    flag = "" if valid_status(status) else f" — not a valid measurement ({status_label(rec)})"
    return (
        table(("measure", "value"), facts, "facts")
        + f"<h3>Latency (seconds, exact over every request){esc(flag)}</h3>"
        + table(("", "p50", "p90", "p99", "max", "mean", "n", "method"), lat, "numbers")
    )


def _s(v: Any) -> str | None:
    return None if not isinstance(v, int | float) else f"{v:,.2f} s"


def gates(rec: RunRecord) -> str:
    """Each phase and suite: passed/total, then every failed task with its reason."""
    rows, failures = [], []
    for phase, suites in rec.gates.items():
        for suite, g in suites.items():
            rows.append((phase, suite, f"{g.passed}/{g.total}", g.not_run))
            failures += [(phase, suite, f.label, f.outcome, f.reason) for f in g.failures]
    if not rows:
        return '<p class="none">no gates ran</p>'
    out = table(("phase", "suite", "passed", "not run"), rows, "numbers")
    if failures:
        out += "<h3>Failed tasks</h3>" + table(
            ("phase", "suite", "task", "outcome", "reason"), failures
        )
    return out


def _every_field(items: Sequence[BaseModel], cls: str = "", leave_out: str = "") -> str:
    """One row per model, one column per field any of them holds as the record has it
    (unknown keys another version wrote included); fields starting ``leave_out`` are not
    shown."""
    dumped = [m.model_dump(mode="json") for m in items]
    keys = list(dict.fromkeys(k for d in dumped for k in d))
    keys = [k for k in keys if not (leave_out and k.startswith(leave_out))]
    return table(keys, ([d.get(k) for k in keys] for d in dumped), cls)


def thresholds(rec: RunRecord) -> str:
    """Every threshold's final state with the fields the record gives it."""
    if not rec.thresholds:
        return '<p class="none">no thresholds configured</p>'
    return _every_field(rec.thresholds)


def _windows(rc: Reconciliation) -> list[tuple[str, ReconciledWindow]]:
    """The windows in the record's order: the ones this version names, then any window a
    newer soaktop added (a key this version does not declare), read as a window."""
    named = [(w, res) for w, res in (("before", rc.before), ("load", rc.load), ("after", rc.after))]
    out = [(w, res) for w, res in named if res is not None]
    for key, value in rc.unknown_keys().items():
        if isinstance(value, dict):
            with contextlib.suppress(ValidationError):
                out.append((key, ReconciledWindow.model_validate(value)))
    return out


def _older_counts(res: ReconciledWindow, counter: str) -> tuple[Any, Any]:
    """Records before per-counter reconciliation kept one ``client`` and one ``server``
    dict per window (keys this version does not declare): a counter's pair from them."""
    kept = res.unknown_keys()
    client, server = kept.get("client"), kept.get("server")
    return (
        client.get(counter) if isinstance(client, dict) else None,
        server.get(counter) if isinstance(server, dict) else None,
    )


def _counter_row(
    res: ReconciledWindow, counter: str, item: CounterComparison | None
) -> tuple[Any, ...]:
    """(status, client, server, difference, why) of one counter of one window."""
    if item is not None:  # the current format
        return item.status, item.client, item.server, item.difference, item.why
    client, server = _older_counts(res, counter)
    diff = None if client is None or server is None else server - client
    m = res.matched
    status = "matched" if m is True else "mismatched" if m is False else "unavailable"
    return status, client, server, diff, res.unavailable


def reconciliation(rec: RunRecord) -> str:
    """Client vs server counters, one row per window and counter (both record formats:
    per-counter ``{status, client, server, difference}``, and the older per-window
    ``client``/``server`` dicts)."""
    rc = rec.reconciliation
    if not rc.model_dump():
        return '<p class="none">no reconciliation in this record</p>'
    rows = []
    for window, res in _windows(rc):
        counters = (
            ("requests", res.requests),
            ("prompt_tokens", res.prompt_tokens),
            ("generation_tokens", res.generation_tokens),
        )
        for name, item in counters:
            rows.append((window, name.replace("_", " "), *_counter_row(res, name, item)))
    overall = rc.matched
    verdict = "yes" if overall is True else "no" if overall is False else "nothing was compared"
    head = f"<p>every window that could be compared matched: <b>{esc(verdict)}</b></p>"
    return head + table(
        ("window", "counter", "status", "client", "server", "difference", "why"), rows, "numbers"
    )


def faults(rec: RunRecord, fields: frozenset[str], run_dir: Path) -> str:
    """The record's ``faults[]``; for a record older than that field, recomputed from
    events.jsonl the same way the runner does (and the page says so)."""
    note = ""
    items = rec.faults
    if "faults" not in fields:
        load_start = rec.load.issue_start_s if rec.load is not None else None
        events = faults_from_events(read_jsonl(run_dir / "events.jsonl"), load_start)
        items = [Fault.model_validate(f) for f in events]
        note = (
            '<p class="note">this record predates <code>faults</code>: the list below is '
            "recomputed from events.jsonl</p>"
        )
    rows = []
    for f in items:
        rel = f.time_s
        at = when(rel, 0.0)[3:] if isinstance(rel, int | float) else _s(f.t_s)
        where = next((w for w in (f.gpu, f.replica, f.endpoint) if w is not None), None)
        rows.append((at, f.source, f.kind, f.severity, where, f.detail))
    return note + table(("when", "source", "kind", "severity", "GPU/replica", "detail"), rows)


def engines(rec: RunRecord) -> str:
    """What each endpoint's /metrics said during the load (``telemetry.engines``)."""
    items = rec.telemetry.engines
    if not items:
        return '<p class="none">no engine metrics</p>'
    out = _every_field(items, "numbers", leave_out="server_")
    lat = []
    for e in items:
        server = (("ttft", e.server_ttft_s), ("e2e", e.server_e2e_s), ("queue", e.server_queue_s))
        lat += [
            [e.endpoint, name, st.shown("p50"), st.shown("p99"), st.mean, st.n]
            for name, st in server
            if st is not None
        ]
    if lat:
        # Each estimate with the bucket that holds it: a p50 "0.15" inside the first
        # bucket [0, 0.3] is the histogram's resolution, not a measurement.
        out += (
            "<h3>Server-side latency (histogram estimates)</h3>"
            + table(("endpoint", "measure", "p50", "p99", "mean s (exact)", "n"), lat, "numbers")
            + '<p class="note">Percentiles are interpolated inside the server\'s histogram '
            "buckets: only the bucket is known (the client's exact percentiles are in Load); "
            "the mean is the server's sum over its count.</p>"
        )
    return out


def identity(rec: RunRecord) -> str:
    """Model, engine, endpoints with version, KV token slots and memory target."""
    ident = rec.identity
    if ident is None:
        return '<p class="none">no identity in this record</p>'
    rows = [
        (e.url, e.engine, e.version, e.reachable, e.token_slots, memory_target(e.cache_config))
        for e in ident.endpoints
    ]
    facts = [
        ("model", ident.model),
        ("engine", ident.engine),
        ("soaktop", ident.soaktop_version),
        ("prompt pool", ident.prompt_pool.model_dump(mode="json")),
        ("GPUs", len(ident.gpus)),
    ]
    return table(("", ""), facts, "facts") + table(
        ("endpoint", "engine", "version", "reachable", "KV token slots", "GPU memory target"),
        rows,
    )


def config(rec: RunRecord) -> str:
    """The full configuration, folded."""
    return (
        "<details><summary>configuration</summary>"
        + table(("key", "value"), sorted(rec.config.items()), "facts")
        + "</details>"
    )
