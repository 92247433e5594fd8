"""The protocol of one run (DESIGN.md §1): config, identity, gates, load, drain, finalize.

The runner process lives here: it composes the watchers, drives the phases, writes the
journals and the once-a-second snapshot, reads operator controls and finally turns what it
measured into ``record.json`` through the one verdict path in :mod:`soak.judge`.
"""
