"""Pane 5: contract gates per phase and suite, canary rounds, and thresholds."""

from __future__ import annotations

from typing import Any

from textual.content import Content

from soak.record.sections import GateProgress, ThresholdState
from tui.glyphs import Glyphs
from tui.panes.base import Pane, line, lines, muted
from tui.runview import RunView

PHASE_WORDS = {"before": "before", "canary": "canary", "after": "after"}
THRESHOLD_WORDS = {
    "ok": ("ok", "$text-success"),
    "breached": ("BREACHED", "bold $text-error"),
    "no_data": ("no data", "$text-warning"),
}


def suite_parts(name: str, g: GateProgress, phase: str) -> list[tuple[str, str] | str]:
    """``json 23/24 FAIL`` (or ``12/24 …`` while it runs); the word always, colour too."""
    passed, total, done = g.passed, g.total, g.done
    failed = g.failed or max(0, done - passed)
    frac = f"{passed}/{total}"
    if phase == "canary":
        word = ("FAIL", "bold $text-error") if failed else ("ok", "$text-success")
        tail = f" ({g.rounds} rounds)" if g.rounds else ""
        return [f"{name} ", (frac, "bold"), " ", word, tail]
    if done < total:
        word = ("FAIL", "bold $text-error") if failed else (f"{done} done", "dim")
        return [f"{name} ", (frac, "bold"), " ", word]
    if passed >= total:
        return [f"{name} ", (frac, "bold"), " ", ("PASS", "bold $text-success")]
    return [f"{name} ", (frac, "bold $text-error"), " ", ("FAIL", "bold $text-error")]


def threshold_line(t: ThresholdState, g: Glyphs) -> Content:
    """``ttft.p99<2s  ok  (0.09)``."""
    word, style = THRESHOLD_WORDS[t.state]
    seen = g.missing if t.observed is None else f"{t.observed:.3g}"
    cond = t.condition or t.expr or "?"
    return line(f"{cond} ", (word, style), muted(f" (observed {seen})"))


class GatesPane(Pane):
    """What the server promised before the load and still keeps after it."""

    NUMBER = 5
    TITLE = "gates"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        snap = view.snapshot
        gates = snap.gates if snap else {}
        out: list[Content | str] = []
        for phase, suites in gates.items():
            if not suites:
                continue
            parts: list[Any] = [(f"{PHASE_WORDS.get(phase, phase):<7}", "bold")]
            for i, (name, res) in enumerate(suites.items()):
                parts += ([f" {g.sep} "] if i else []) + suite_parts(name, res, phase)
            out.append(line(*parts))
        if not out:
            early = (snap.phase if snap else None) in (None, "identity")
            out.append(line(muted("gates not started yet" if early else "no gates run")))
        thresholds = snap.thresholds if snap else []
        if thresholds:
            breached = sum(1 for t in thresholds if t.state == "breached")
            out.append(
                line(("thresholds ", "bold"), muted(f"{len(thresholds)} set, {breached} breached"))
            )
            order = {"breached": 0, "no_data": 1}  # the ones that matter first when clipped
            ranked = sorted(thresholds, key=lambda t: order.get(t.state, 2))
            out += [threshold_line(t, g) for t in ranked]
        else:
            out.append(line(("thresholds ", "bold"), muted("none set")))
        return lines(out[:height])
