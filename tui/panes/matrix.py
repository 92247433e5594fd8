"""Pane 3 in a matrix run: where the matrix stands and each finished cell's medians.

A matrix (``--matrix``, a scout) runs cells of (input tokens × concurrency), each a warm-up
then R repetitions of K requests. The soak's figures do not apply there: percentiles
pooled over every cell mix inputs of different sizes, and there is no issue window. So
pane 3 shows the runner's ``matrix`` progress instead (the snapshot's
:class:`~soak.record.snapshot.MatrixProgress`): the cell, the repetition and its requests,
then one row per finished cell with its pooled median E2E, median TTFT (first content),
completed of sent and, when wide, the mean input tokens the server counted. Nothing is
computed here: the runner folds the figures at its snapshot tick.
"""

from __future__ import annotations

from textual.content import Content

from soak.record.snapshot import MatrixCellNow, MatrixProgress
from tui.fmt import clip, count, secs
from tui.glyphs import Glyphs
from tui.panes.base import Part, fit, line, lines, muted

LABEL = 12
"""``~25000 / C16``: the widest label a common scout has."""
WIDE = 46
"""From this width, the mean input tokens join the row."""


def build(m: MatrixProgress, g: Glyphs, width: int, height: int) -> Content:
    """The matrix pane in ``width`` × ``height`` cells: the progress line, the table head
    and the finished cells, the latest ones when they do not all fit (a line says how many
    earlier ones are left out: maximising the pane shows them)."""
    style = "bold $text-success" if m.phase == "done" else "bold"
    out: list[Content] = [fit(line((m.where(), style)), width, g)]
    if height < 2:
        return lines(out)
    if not m.finished:
        out.append(line(muted("no cell finished yet: each cell's medians appear as it ends")))
        return lines(out)
    wide = width >= WIDE
    head = f"{'cell':<{LABEL}} {'E2E med':>7} {'TTFT':>6} {'done':>7}"
    out.append(line(muted(head + (f" {'input':>7}" if wide else ""))))
    room = height - 2
    rows = m.finished
    if len(rows) > room:
        keep = max(0, room - 1)
        left_out = len(rows) - keep
        out.append(line(muted(f"+{left_out} earlier cell{'s' if left_out != 1 else ''} (3)")))
        rows = rows[len(rows) - keep :] if keep else []
    out += [fit(_row(c, g, wide), width, g) for c in rows]
    return lines(out)


def _row(c: MatrixCellNow, g: Glyphs, wide: bool) -> Content:
    """``~6000 / C4    3.12s  412ms    12/12   6,012``: failures in the error style."""
    sent = c.completed + c.failed
    done = f"{c.completed}/{sent}"
    parts: list[Part] = [
        (f"{clip(c.label, LABEL, g):<{LABEL}}", "bold"),
        f" {secs(c.e2e_median_s, g):>7} {secs(c.ttft_content_median_s, g):>6} ",
        (f"{done:>7}", "$text-error" if c.failed else ""),
    ]
    if wide:
        mean = c.input_tokens_mean
        parts.append(f" {f'{mean:,.0f}' if mean is not None else count(None, g):>7}")
    return line(*parts)
