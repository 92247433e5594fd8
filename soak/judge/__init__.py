"""Judgement: pure functions from the run's facts to findings and reasons.

One judge (:func:`soak.judge.verdict.judge`) turns a run's facts
(:class:`soak.judge.facts.RunFacts`) into its status, reasons and final threshold
states; finalize, recover and verify all call it, and differ only in how they gather the
facts, so a record can be re-checked from its journals by the same code that wrote it.
Beside it: the load's reasons, the fault reasons (server logs, /health, restarts, GPU
faults), thresholds, reconciliation against the engine's counters, telemetry coverage,
the matrix, and the verdict's limits with their defaults (:mod:`soak.judge.limits`).
"""
