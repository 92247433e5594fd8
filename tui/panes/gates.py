"""Pane 5: contract gates per phase and suite, canary rounds, and thresholds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.content import Content

from tui.fmt import dicts, mapping, num, text
from tui.glyphs import Glyphs
from tui.panes.base import Pane, line, lines, muted
from tui.runview import RunView

PHASE_WORDS = {"before": "before", "canary": "canary", "after": "after"}
THRESHOLD_WORDS = {
    "ok": ("ok", "$text-success"),
    "breached": ("BREACHED", "bold $text-error"),
    "no_data": ("no data", "$text-warning"),
}


def suite_parts(name: str, g: Mapping[str, Any], phase: str) -> list[tuple[str, str] | str]:
    """``json 23/24 FAIL`` (or ``12/24 …`` while it runs); the word always, colour too."""
    passed = int(num(g, "passed") or 0)
    total = int(num(g, "total") or 0)
    done_n = num(g, "done")
    done = total if done_n is None else int(done_n)
    failed = int(num(g, "failed") or max(0, done - passed))
    frac = f"{passed}/{total}"
    if phase == "canary":
        rounds = num(g, "rounds")
        word = ("FAIL", "bold $text-error") if failed else ("ok", "$text-success")
        tail = f" ({int(rounds)} rounds)" if rounds else ""
        return [f"{name} ", (frac, "bold"), " ", word, tail]
    if done < total:
        word = ("FAIL", "bold $text-error") if failed else (f"{done} done", "dim")
        return [f"{name} ", (frac, "bold"), " ", word]
    if passed >= total:
        return [f"{name} ", (frac, "bold"), " ", ("PASS", "bold $text-success")]
    return [f"{name} ", (frac, "bold $text-error"), " ", ("FAIL", "bold $text-error")]


def threshold_line(t: Mapping[str, Any], g: Glyphs) -> Content:
    """``ttft.p99<2s  ok  (0.09)``."""
    state = text(t, "state") or "no_data"
    word, style = THRESHOLD_WORDS.get(state, (state, ""))
    observed = num(t, "observed")
    seen = g.missing if observed is None else f"{observed:.3g}"
    cond = text(t, "condition") or text(t, "expr") or "?"
    return line(f"{cond} ", (word, style), muted(f" (observed {seen})"))


class GatesPane(Pane):
    """What the server promised before the load and still keeps after it."""

    NUMBER = 5
    TITLE = "gates"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        gates = mapping(view.snapshot, "gates")
        out: list[Content | str] = []
        for phase, suites in gates.items():
            if not isinstance(suites, Mapping) or not suites:
                continue
            parts: list[Any] = [(f"{PHASE_WORDS.get(phase, phase):<7}", "bold")]
            for i, (name, res) in enumerate(suites.items()):
                if isinstance(res, Mapping):
                    parts += ([f" {g.sep} "] if i else []) + suite_parts(name, res, phase)
            out.append(line(*parts))
        if not out:
            early = text(view.snapshot, "phase") in (None, "identity")
            out.append(line(muted("gates not started yet" if early else "no gates run")))
        thresholds = dicts(view.snapshot, "thresholds")
        if thresholds:
            breached = sum(1 for t in thresholds if t.get("state") == "breached")
            out.append(
                line(("thresholds ", "bold"), muted(f"{len(thresholds)} set, {breached} breached"))
            )
            order = {"breached": 0, "no_data": 1}  # the ones that matter first when clipped
            ranked = sorted(thresholds, key=lambda t: order.get(str(t.get("state")), 2))
            out += [threshold_line(t, g) for t in ranked]
        else:
            out.append(line(("thresholds ", "bold"), muted("none set")))
        return lines(out[:height])
