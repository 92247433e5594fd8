"""Pane 1, the header: run id, target, phase with progress, verdict so far."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.content import Content

from soak.judge.coverage import SOURCE_WORDS
from tui.coverage import answered, coverage, lost_so_far, short_key
from tui.fmt import (
    clip,
    dicts,
    mapping,
    mmss,
    num,
    pct,
    phase_label,
    rate,
    secs,
    status_style,
    text,
)
from tui.panes.base import Pane, fit, line, lines, muted
from tui.runview import RunView

_NOTICE_STYLES = {
    "info": "bold $text-accent",
    "warning": "bold $text-warning",
    "error": "bold $text-error",
}


def phase_progress(view: RunView) -> tuple[str, float | None]:
    """The phase in words with its detail, and how far it is (0–1) when that is known."""
    snap = view.snapshot
    phase = text(snap, "phase")
    label = phase_label(phase)
    elapsed = num(snap, "phase_elapsed_s")
    if phase in ("load", "paused"):
        done, total = num(snap, "load", "issue_elapsed_s"), num(snap, "load", "issue_total_s")
        if total:
            return f"{label} {mmss(done)} of {mmss(total)}", min(1.0, (done or 0.0) / total)
        return f"{label} {mmss(done)} (until the request count)", None
    if phase in ("before_gates", "after_gates"):
        suites = mapping(snap, "gates", phase.removesuffix("_gates"))
        total = sum(num(s, "total") or 0 for s in suites.values())
        done = sum(num(s, "done") or 0 for s in suites.values())
        if total:
            return f"{label} {int(done)}/{int(total)} probes", done / total
        return f"{label} {mmss(elapsed)}", None
    if phase == "drain":
        in_flight = num(snap, "load", "in_flight")
        left = f", {int(in_flight)} in flight" if in_flight is not None else ""
        return f"{label} {mmss(elapsed)}{left}", None
    if phase in ("matrix", "warmup"):
        # the matrix's phase events name the cell and repetition: "cell 2 (~256 / C1) rep 1/3"
        where = next(
            (e.message for e in reversed(view.events) if e.kind == "phase"),
            "",
        )
        return f"{label} {mmss(elapsed)} {where}".rstrip(), None
    if phase == "done":
        return label, 1.0
    return (f"{label} {mmss(elapsed)}" if snap is not None else label), None


def verdict_so_far(view: RunView) -> list[str]:
    """Counts an operator watches before the verdict: failures, faults, failed probes,
    then each telemetry source lost so far (``engine /metrics e0 lost``; see
    :func:`telemetry_so_far` for which of them fail the run)."""
    return _counts(view) + [f"{lost.label} lost" for lost in lost_so_far(view)]


def _counts(view: RunView) -> list[str]:
    snap = view.snapshot
    out = []
    failed = num(snap, "load", "failed")
    if failed:
        out.append(f"{int(failed)} failed requests")
    faults = sum(1 for e in view.events if e.kind == "fault")
    if faults:
        out.append(f"{faults} fault{'s' if faults != 1 else ''}")
    bad = 0
    for suites in mapping(snap, "gates").values():
        if isinstance(suites, Mapping):
            bad += sum(int(num(s, "failed") or 0) for s in suites.values())
    if bad:
        out.append(f"{bad} failed probe{'s' if bad != 1 else ''}")
    breached = [t for t in dicts(snap, "thresholds") if t.get("state") == "breached"]
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
        run_id = text(snap, "run_id") or (view.meta.run_dir.name if view.meta else "")
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
        bar_w = max(10, min(40, width - len(where) - 16))
        parts: list[Any] = [(where, "bold")]
        if frac is not None:
            parts += ["  ", (g.bar(frac, bar_w), "$text-primary"), f" {frac * 100:3.0f}%"]
        if view.paused:
            parts += ["  ", (" PAUSED ", "reverse $text-warning"), muted(" p resumes")]
        second = line(*parts)

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
        shown = [r for r in reasons if r.get("effect") != "note"] or reasons
        if room >= len(shown) + 1 and room > 2:
            return [line(word), *(line(f"- {text(r, 'message') or ''}") for r in shown)]
        more = len(shown) - 1
        hint = f" (+{more} more: 1)" if more else ""
        first_msg = text(shown[0], "message") or ""
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
            conc = view.meta.concurrency
            dur = view.meta.duration_s
            out.append(
                line(
                    muted("plan     "),
                    f"{conc if conc is not None else g.missing} workers, ",
                    f"issue window {mmss(dur) if dur else g.missing}",
                )
            )
        client = mapping(view.snapshot, "client")
        if client:
            out.append(
                line(
                    muted("client   "),
                    f"cpu {_int(num(client, 'cpu_percent'), g)}%  ",
                    f"rss {rate(num(client, 'rss_mb'), g)} MB  ",
                    f"loop lag {secs(num(client, 'loop_lag_s'), g)}  ",
                    f"fds {_int(num(client, 'open_files'), g)}/{_int(num(client, 'fd_limit'), g)}",
                )
            )
        out += _coverage_lines(view, width)
        at_end = view.cursor is None or view.cursor.index == view.cursor.total - 1
        if view.record is not None and at_end:
            out += _record_lines(view.record, view)
        return out


def _int(v: float | None, g: Any) -> str:
    return g.missing if v is None else str(int(v))


def _coverage_lines(view: RunView, width: int) -> list[Content]:
    """Every telemetry source's coverage of the load so far, one row each (maximised)."""
    g = view.glyphs
    rows = [
        (source, key, e)
        for source, keys in coverage(view).items()
        if isinstance(keys, Mapping)
        for key, e in keys.items()
        if isinstance(e, Mapping)
    ]
    if not rows:
        return []
    out = [line(muted(f"{'telemetry':<30} {'answered':>9} {'share':>5}  why"))]
    for source, key, e in rows:
        lost = e.get("lost") is True
        word = SOURCE_WORDS.get(source, source)
        name = word if key == source else f"{word} {short_key(key)}"  # "host sampling"
        parts: list[Any] = [
            f"{clip(name, 30, g):<30} {answered(e):>9} {pct(num(e, 'share'), g):>5}  ",
            ("LOST ", "bold $text-error") if lost else "",
            muted(text(e, "why") or ""),
        ]
        out.append(fit(line(*parts), width, g))
    return out


def _record_lines(record: Mapping[str, Any], view: RunView) -> list[Content]:
    g = view.glyphs
    load = mapping(record, "load")
    out = [line(muted("record   "), f"exit code {_int(num(record, 'exit_code'), g)}")]
    if load:
        out.append(
            line(
                muted("load     "),
                f"completed {_int(num(load, 'completed'), g)}, ",
                f"failed {_int(num(load, 'failed'), g)}, ",
                f"{rate(num(load, 'output_tokens_per_s'), g)} out tok/s (drain included), ",
                f"P99 TTFT {secs(num(load, 'ttft_s', 'p99'), g)}, ",
                f"P99 E2E {secs(num(load, 'e2e_s', 'p99'), g)}",
            )
        )
    return out
