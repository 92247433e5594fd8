"""Pane 1, the header: run id, target, phase with progress and the endurance badge,
verdict so far."""

from __future__ import annotations

from typing import Any

from textual.content import Content

from soak.judge.coverage import SOURCE_WORDS
from soak.record.faults import distinct_faults
from soak.record.models import RunRecord
from tui.coverage import answered, coverage, lost_so_far, short_key
from tui.fmt import clip, mmss, pct, phase_label, rate, secs, status_style
from tui.glyphs import Glyphs
from tui.panes.base import Pane, fit, line, lines, muted
from tui.panes.endurance import badge
from tui.panes.endurance import details as endurance_details
from tui.runview import RunView

_NOTICE_STYLES = {
    "info": "bold $text-accent",
    "warning": "bold $text-warning",
    "error": "bold $text-error",
}


def phase_progress(view: RunView) -> tuple[str, float | None]:
    """The phase in words with its detail, and how far it is (0–1) when that is known."""
    snap = view.snapshot
    if snap is None:
        return phase_label(None), None
    phase = snap.phase
    label = phase_label(phase)
    elapsed = snap.phase_elapsed_s
    if phase in ("load", "paused"):
        done, total = snap.load.issue_elapsed_s, snap.load.issue_total_s
        # a stepped load: "step 3/5 rate=20 · settle 4 s left" after the window's clock
        step = f" {view.glyphs.sep} {snap.steps.where()}" if snap.steps is not None else ""
        if total:
            return (
                f"{label} {mmss(done)} of {mmss(total)}{step}",
                min(1.0, (done or 0.0) / total),
            )
        if step:
            return f"{label} {mmss(done)}{step}", snap.steps.fraction() if snap.steps else None
        return f"{label} {mmss(done)} (until the request count)", None
    if phase in ("before_gates", "after_gates"):
        suites = snap.gates.get(phase.removesuffix("_gates"), {})
        total = sum(s.total for s in suites.values())
        done = sum(s.done for s in suites.values())
        if total:
            return f"{label} {done}/{total} probes", done / total
        return f"{label} {mmss(elapsed)}", None
    if phase == "drain":
        return f"{label} {mmss(elapsed)}, {snap.load.in_flight} in flight", None
    if phase in ("matrix", "warmup") and view.matrix is not None:
        # "cell 3/4 ~6000/C4 · rep 2/3 · 3/4 requests", the bar over the whole matrix
        return view.matrix.where(), view.matrix.fraction()
    if phase in ("matrix", "warmup"):
        # a run before schema 1.3: its phase events name the cell and repetition
        where = next(
            (e.event.message for e in reversed(view.events) if e.event.kind == "phase"),
            "",
        )
        return f"{label} {mmss(elapsed)} {where}".rstrip(), None
    if phase == "done":
        return label, 1.0
    return f"{label} {mmss(elapsed)}", None


def verdict_so_far(view: RunView) -> list[str]:
    """Counts an operator watches before the verdict: failures, faults, failed probes,
    then each telemetry source lost so far (``engine /metrics e0 lost``; see
    :func:`telemetry_so_far` for which of them fail the run)."""
    return _counts(view) + [f"{lost.label} lost" for lost in lost_so_far(view)]


def _counts(view: RunView) -> list[str]:
    snap = view.snapshot
    out = []
    if snap is not None and snap.load.failed:
        out.append(f"{snap.load.failed} failed requests")
    faults, reports = distinct_faults(
        {"kind": e.event.kind, "t": e.event.t, "message": e.event.message, "data": e.event.data}
        for e in view.events
        if e.event.kind == "fault"
    )
    if faults:  # one Xid that DCGM, the kernel line and the CUDA error reported: 1 fault
        seen = f" ({reports} reports)" if reports > faults else ""
        out.append(f"{faults} fault{'s' if faults != 1 else ''}{seen}")
    gates = snap.gates if snap is not None else {}
    bad = sum(s.failed for suites in gates.values() for s in suites.values())
    if bad:
        out.append(f"{bad} failed probe{'s' if bad != 1 else ''}")
    thresholds = snap.thresholds if snap is not None else []
    breached = [t for t in thresholds if t.state == "breached"]
    if breached:
        out.append(f"{len(breached)} threshold{'s' if len(breached) != 1 else ''} breached")
    return out


def telemetry_so_far(view: RunView) -> list[tuple[str, str]]:
    """The lost sources as styled pieces: failed (``--require-telemetry``) like a failed
    verdict, a note as a warning."""
    return [
        (f"{lost.label} lost", status_style("FAILED") if lost.failed else "$text-warning")
        for lost in lost_so_far(view)
    ]


class HeaderPane(Pane):
    """Who, what, where in the protocol, and how it is going."""

    NUMBER = 1
    TITLE = "run"

    def show(self, view: RunView) -> None:
        """Draw this frame; one more line while there is a notice."""
        self.set_class(bool(view.notice), "-notice")
        super().show(view)

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        snap = view.snapshot
        run_id = (snap.run_id if snap else "") or (view.meta.run_dir.name if view.meta else "")
        if view.cursor is not None:
            tag = (
                f" REPLAY {view.cursor.index + 1}/{view.cursor.total} ",
                "reverse $text-secondary",
            )
        else:
            tag = (" LIVE ", "reverse $text-primary")
        target = view.meta.target if view.meta else "target unknown"
        first = line(
            ("soaktop ", "bold"),
            tag,
            " ",
            clip(run_id, max(8, width - 30), g),
            f" {g.sep} ",
            target,
        )

        where, frac = phase_progress(view)
        # The endurance badge takes what the bar can give (6 cells stay the bar's).
        soak = line(*badge(view, width - len(where) - 15))
        least = 6 if soak.cell_length else 10
        bar_w = max(least, min(40, width - len(where) - 16 - soak.cell_length))
        parts: list[Any] = [(where, "bold")]
        if frac is not None:
            parts += ["  ", (g.bar(frac, bar_w), "$text-primary"), f" {frac * 100:3.0f}%"]
        if soak.cell_length:
            parts += ["  ", soak]
        if view.paused:
            parts += ["  ", (" PAUSED ", "reverse $text-warning"), muted(" p resumes")]
        second = fit(line(*parts), width, g)

        rows = [first, second, *self._verdict(view, width, height - 2)]
        if view.notice:
            rows.insert(
                2, line((clip(view.notice, width * 2, g), _NOTICE_STYLES[view.notice_severity]))
            )
        if height > 4:
            rows += self._details(view, width)
        return lines(rows)

    def _verdict(self, view: RunView, width: int, room: int) -> list[Content]:
        g = view.glyphs
        status = view.status
        reasons = view.reasons
        word = (f" {status} ", f"reverse {status_style(status)}")
        if status == "running":
            counts = _counts(view)
            lost = telemetry_so_far(view)
            tail = ", ".join(counts) if counts or lost else "no failures so far"
            parts: list[Any] = [
                ("verdict ", "dim"),
                (status, "bold"),
                " ",
                muted(f"{g.sep} {tail}"),
            ]
            for i, piece in enumerate(lost):
                parts += [muted(", ") if i or counts else "", piece]
            return [fit(line(*parts), width, g)]
        if not reasons:
            return [line(word)]
        shown = [r for r in reasons if r.effect != "note"] or reasons
        if room >= len(shown) + 1 and room > 2:
            return [line(word), *(line(f"- {r.message}") for r in shown)]
        more = len(shown) - 1
        hint = f" (+{more} more: 1)" if more else ""
        first_msg = shown[0].message
        return [
            line(
                word,
                " ",
                clip(first_msg, max(10, width - len(status) - len(hint) - 4), g),
                muted(hint),
            )
        ]

    def _details(self, view: RunView, width: int) -> list[Content]:
        """Shown when the header is maximised: where the files are and the final figures."""
        g = view.glyphs
        out: list[Content] = [line("")]
        if view.meta:
            out.append(line(muted("run dir  "), str(view.meta.run_dir)))
            out.append(line(muted("plan     "), _plan(view)))
        if view.snapshot is not None:
            client = view.snapshot.client
            out.append(
                line(
                    muted("client   "),
                    f"cpu {_int(client.cpu_percent, g)}%  ",
                    f"rss {rate(client.rss_mb, g)} MB  ",
                    f"loop lag {secs(client.loop_lag_s, g)}  ",
                    f"fds {_int(client.open_files, g)}/{_int(client.fd_limit, g)}",
                )
            )
        out += _coverage_lines(view, width)
        out += endurance_details(view, width)
        at_end = view.cursor is None or view.cursor.index == view.cursor.total - 1
        if view.record is not None and at_end:
            out += _record_lines(view.record, view)
        if view.skipped_lines:
            n = view.skipped_lines
            out.append(
                line(
                    muted("journals "),
                    (f"{n} line{'s' if n != 1 else ''} unreadable, not shown", "$text-warning"),
                )
            )
        return out


def _plan(view: RunView) -> str:
    """``32 workers, issue window 01:00`` for a soak; a matrix run's specification
    (``matrix input=6000,25000 concurrency=1,4 reps=3 requests=4 warmup=1``): its
    concurrency is each cell's and it has no issue window."""
    g, meta = view.glyphs, view.meta
    if meta is None:
        return g.missing
    if meta.matrix or view.matrix is not None:
        return f"matrix {meta.matrix or g.missing}"
    conc, dur = meta.concurrency, meta.duration_s
    return (
        f"{conc if conc is not None else g.missing} workers, "
        f"issue window {mmss(dur) if dur else g.missing}"
    )


def _int(v: float | None, g: Glyphs) -> str:
    return g.missing if v is None else str(int(v))


def _coverage_lines(view: RunView, width: int) -> list[Content]:
    """Every telemetry source's coverage of the load so far, one row each (maximised)."""
    g = view.glyphs
    rows = [(source, key, e) for source, keys in coverage(view).items() for key, e in keys.items()]
    if not rows:
        return []
    out = [line(muted(f"{'telemetry':<30} {'answered':>9} {'share':>5}  why"))]
    for source, key, e in rows:
        word = SOURCE_WORDS.get(source, source)
        name = word if key == source else f"{word} {short_key(key)}"  # "host sampling"
        parts: list[Any] = [
            f"{clip(name, 30, g):<30} {answered(e):>9} {pct(e.share, g):>5}  ",
            ("LOST ", "bold $text-error") if e.lost else "",
            muted(e.why or ""),
        ]
        out.append(fit(line(*parts), width, g))
    return out


def _record_lines(record: RunRecord, view: RunView) -> list[Content]:
    g = view.glyphs
    load = record.load
    out = [line(muted("record   "), f"exit code {record.exit_code}")]
    if load is not None:
        out.append(
            line(
                muted("load     "),
                f"completed {load.completed}, ",
                f"failed {load.failed}, ",
                f"{rate(load.output_tokens_per_s, g)} out tok/s (drain included), ",
                f"P99 TTFT {secs(load.ttft_s.p99, g)}, ",
                f"P99 E2E {secs(load.e2e_s.p99, g)}",
            )
        )
    return out
