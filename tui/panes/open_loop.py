"""Pane 4's first lines in an open loop: the schedule against what the client sent.

An open loop's worry is not "are the workers up" but "is the client keeping the
schedule": the offered rate (the schedule's arrivals due) beside the achieved one (sent),
over the last window and the whole load; lateness p99 (sent − intended); arrivals held
by the in-flight cap; in flight against the cap. Two lines, each fitting the 37 cells
pane 4 has at 80×24; wider, the words are spelled out. The numbers are the snapshot's
(:class:`~soak.record.snapshot.OpenLoopNow`); nothing is computed here.
"""

from __future__ import annotations

from textual.content import Content

from soak.record.snapshot import OpenLoopNow
from tui.fmt import count, rate, secs
from tui.glyphs import Glyphs
from tui.panes.base import Part, fit, line, muted

WIDE = 56
"""From this width, the long words."""
LATE_WARN_S = 0.050
"""Lateness p99 above the judge's bound (``rate_not_achieved``) shows as a warning."""


def open_loop_lines(o: OpenLoopNow, g: Glyphs, width: int) -> list[Content]:
    """``in flight 12/400 held 0 late 3.0ms`` and ``19.8→19.7/s win 20.0→19.9 all``."""
    wide = width >= WIDE
    late = o.lateness_window_s.p99 if o.lateness_window_s.n else o.lateness_s.p99
    late_style = "bold $text-warning" if late is not None and late > LATE_WARN_S else "bold"
    held_style = "bold $text-warning" if o.held_by_cap else "bold"
    first: list[Part] = [
        muted("in flight "),
        (f"{o.in_flight}", "bold $text-primary"),
        muted(f"/{o.max_in_flight}"),
    ]
    if wide:
        first.append(muted(f" peak {o.in_flight_peak}"))
    first += [
        muted(" held " if not wide else "  held by cap "),
        (count(o.held_by_cap, g), held_style),
        muted(" late " if not wide else "  lateness p99 "),
        (secs(late, g), late_style),
    ]
    arrow = g.arrow
    offered_w, offered_all = o.offered_window_per_s, o.offered_per_s
    word = "offered"
    if offered_w is None and offered_all is None:  # a changed schedule: its target instead
        offered_w, offered_all, word = o.rate, None, "target"
    second: list[Part] = [muted(word + arrow + "sent ") if wide else ""]
    second += [
        (f"{rate(offered_w, g)}{arrow}{rate(o.achieved_window_per_s, g)}", "bold"),
        muted("/s win " if not wide else "/s last window  "),
        f"{rate(offered_all, g)}{arrow}{rate(o.achieved_per_s, g)}",
        muted(" all"),
    ]
    if wide:
        aim = "trace replay" if o.rate is None else f"target {rate(o.rate, g)}/s {o.arrival}"
        second.append(muted(f"  {aim}"))
    return [fit(line(*first), width, g), fit(line(*second), width, g)]
