"""Did each step of an open-loop load hold its schedule? (issue 16 §1, §3, §4)

A stepped load is measured step by step: a sweep's step at 40 req/s that the client could
not send is no measurement at 40 req/s even when the whole load's average looks held.
Each step's figures are judged by the whole load's rule (:func:`rate_reasons`), and a
missed one is its own ``rate_not_achieved`` (invalid) naming the step.
"""

from __future__ import annotations

from collections.abc import Sequence

from soak.judge.rate_reasons import rate_reasons
from soak.record.models import LoadStep, Reason


def step_reasons(steps: Sequence[LoadStep]) -> list[Reason]:
    """One ``rate_not_achieved`` per open-loop step that missed its schedule."""
    out: list[Reason] = []
    for step in steps:
        if step.load is None or not step.load.issue_s:
            continue  # a step of no length measured nothing, and claims nothing
        for r in rate_reasons(step.load):
            out.append(
                r.model_copy(update={"message": f"step {step.index} ({step.label}): {r.message}"})
            )
    return out
