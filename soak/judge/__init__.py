"""Judgement: pure functions from the run's facts to findings and reasons.

Thresholds, reconciliation against the engine's counters, telemetry coverage and the
verdict. Finalize, recover and verify all reach their reasons through here, so a record
can be re-checked from its journals by the same code that wrote it.
"""
