"""The Textual monitor (a viewer of the runner's snapshots; no measurement here).

Not built yet: it is the plan's live-monitor issue. Until then ``soaktop run`` and
``soaktop demo`` run headless and say so.
"""
