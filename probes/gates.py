"""Contract gates: run suites of probes for one phase and count what passed.

A phase is ``before`` (ahead of the barrier), ``canary`` (a small rotating sample while
the load runs, outside the worker count) or ``after`` (after the drain). Tasks are spread
over the endpoints round-robin, so every replica is checked and a suite still counts
24/24. A retry (``retries`` > 0, off by default) is a new recorded attempt, never a silent
one; a task that passed only on a retry is listed as such.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from probes.probe import ProbeSender, accounting
from probes.probe_record import Exchange, Outcome, ProbeResult
from probes.suite import Suite, Task

PHASE_WORDS = {"before": "before-load", "canary": "canary (during load)", "after": "after-load"}

ResultSink = Callable[[ProbeResult, list[Exchange]], None]
"""Called with every attempt as it ends (journal it, write evidence for a failure)."""


class GateFailure(BaseModel):
    """A task that did not pass (or passed only on a retry)."""

    model_config = ConfigDict(extra="forbid")

    label: str
    """``json#7 (invoice)``."""
    outcome: Outcome
    reason: str
    status: int | None = None
    request_id: str
    endpoint: int = 0
    t_s: float
    """Seconds since the run origin (canary failures show when drift began)."""
    wall: str
    round: int | None = None
    attempts: int = 1
    evidence: str | None = None


class SuiteGate(BaseModel):
    """``gates.<phase>.<suite>`` in the record."""

    model_config = ConfigDict(extra="forbid")

    passed: int = 0
    total: int = 0
    """Tasks of the suite: planned for before/after (so ``23/24`` reads against the suite's
    size even when the phase was cut short); tasks sent, for canaries."""
    not_run: int = 0
    """Planned tasks that were never sent (an abort or a killed runner cut the phase)."""
    failures: list[GateFailure] = Field(default_factory=list)
    """Tasks whose last attempt failed."""
    outcomes: dict[str, int] = Field(default_factory=dict)
    """Last-attempt outcomes: pass, contract, availability, client."""
    passed_on_retry: list[GateFailure] = Field(default_factory=list)
    """Tasks that failed first and passed on a retry (the first failure is shown)."""
    attempts: int = 0
    """All attempts, retries included (= probes.jsonl lines of this suite and phase)."""
    rounds: int | None = None
    """Canary rounds that ran this suite."""


def _failure(r: ProbeResult, attempts: int) -> GateFailure:
    return GateFailure(
        label=r.label,
        outcome=r.outcome,
        reason=r.reason,
        status=r.status,
        request_id=r.request_id,
        endpoint=r.endpoint,
        t_s=round(r.t_s, 3),
        wall=r.wall,
        round=r.round,
        attempts=attempts,
        evidence=r.evidence,
    )


def summarize(
    results: list[ProbeResult], planned: dict[str, dict[str, int]] | None = None
) -> dict[str, dict[str, SuiteGate]]:
    """``{phase: {suite: SuiteGate}}`` from probe attempts (probes.jsonl lines).

    A task is judged by its last attempt; tasks are keyed by (phase, suite, index, round).
    ``planned`` (``{phase: {suite: tasks}}``, from the gate-phase start events) makes a
    phase that was cut short count its unsent tasks as not run, never as a clean 11/11.
    """
    tasks: dict[tuple[str, str, int, int | None], list[ProbeResult]] = {}
    for r in results:
        tasks.setdefault((r.phase, r.suite, r.index, r.round), []).append(r)
    out: dict[str, dict[str, SuiteGate]] = {}
    rounds: dict[tuple[str, str], set[int]] = {}
    for (phase, suite, _, rnd), attempts in tasks.items():
        attempts.sort(key=lambda a: a.attempt)
        gate = out.setdefault(phase, {}).setdefault(suite, SuiteGate())
        last = attempts[-1]
        gate.total += 1
        gate.attempts += len(attempts)
        gate.outcomes[last.outcome] = gate.outcomes.get(last.outcome, 0) + 1
        if rnd is not None:
            rounds.setdefault((phase, suite), set()).add(rnd)
        if last.outcome == "pass":
            gate.passed += 1
            if len(attempts) > 1:
                gate.passed_on_retry.append(_failure(attempts[0], len(attempts)))
        else:
            gate.failures.append(_failure(last, len(attempts)))
    for (phase, suite), rs in rounds.items():
        out[phase][suite].rounds = len(rs)
    for phase, plan in (planned or {}).items():
        for suite, n in plan.items():
            gate = out.setdefault(phase, {}).setdefault(suite, SuiteGate())
            gate.not_run = max(0, n - gate.total)
            gate.total = max(n, gate.total)
    for gates in out.values():
        for gate in gates.values():
            gate.failures.sort(key=lambda f: f.t_s)
    return out


def gates_json(gates: dict[str, dict[str, SuiteGate]]) -> dict[str, dict[str, Any]]:
    """The record's ``gates`` section."""
    return {p: {k: g.model_dump(mode="json") for k, g in su.items()} for p, su in gates.items()}


@dataclass
class GatePlan:
    """What a gate phase runs, and where."""

    run_id: str
    endpoints: list[str]
    suites: dict[str, Suite]
    origin_ns: int
    concurrency: int = 4
    retries: int = 0


def canary_sample(tasks: list[Task], per_round: int, round_no: int) -> list[tuple[int, Task]]:
    """Round ``round_no`` (1-based) takes the next ``per_round`` tasks, cycling, so that
    successive rounds cover the whole suite."""
    n = len(tasks)
    start = ((round_no - 1) * per_round) % n
    picks = [(start + k) % n for k in range(min(per_round, n))]
    return [(i + 1, tasks[i]) for i in picks]


class GateRunner:
    """Runs gate phases with one :class:`ProbeSender`."""

    def __init__(self, plan: GatePlan, sender: ProbeSender, sink: ResultSink) -> None:
        self.plan = plan
        self.sender = sender
        self.sink = sink
        self.done: dict[tuple[str, str], int] = {}
        """Probes finished per (phase, suite) so far: the live progress."""
        self._sent = 0
        """Tasks started so far; the round-robin goes on across phases and canary rounds,
        so a one-probe canary round does not always land on the first replica."""

    def _request_id(self, phase: str, suite: str, index: int, rnd: int | None, k: int) -> str:
        rid = f"{self.plan.run_id}/{phase}/{suite}/{index}"
        if rnd is not None:
            rid += f".{rnd}"
        return rid + (f".r{k}" if k else "")

    async def _task(
        self, phase: str, suite: Suite, index: int, task: Task, rnd: int | None, ordinal: int
    ) -> list[ProbeResult]:
        ep = ordinal % len(self.plan.endpoints)
        base = self.plan.endpoints[ep]
        out: list[ProbeResult] = []
        for k in range(self.plan.retries + 1):
            rid = self._request_id(phase, suite.suite, index, rnd, k)
            t_s = (time.perf_counter_ns() - self.plan.origin_ns) / 1e9
            wall = datetime.now(UTC).isoformat(timespec="milliseconds")
            outcome, reason, finish, exchanges = await self.sender.run(suite, task, base, rid)
            last = exchanges[-1] if exchanges else None
            acc = accounting(exchanges)
            result = ProbeResult(
                phase=phase,
                suite=suite.suite,
                kind=suite.kind,
                task=task.id,
                index=index,
                round=rnd,
                attempt=k,
                endpoint=ep,
                request_id=rid,
                outcome=outcome,
                reason=reason,
                status=last.status if last else None,
                finish_reason=finish,
                latency_s=sum(e.latency_s or 0.0 for e in exchanges) if exchanges else None,
                t_s=t_s,
                wall=wall,
                requests=acc["requests"],
                completed=acc["completed"],
                prompt_tokens=acc["prompt_tokens"],
                completion_tokens=acc["completion_tokens"],
            )
            self.sink(result, exchanges)
            out.append(result)
            if outcome == "pass":
                break
        key = (phase, suite.suite)
        self.done[key] = self.done.get(key, 0) + 1
        return out

    async def run_phase(
        self, phase: str, per_round: int | None = None, round_no: int | None = None
    ) -> list[ProbeResult]:
        """Run every suite (or, for a canary round, ``per_round`` tasks of each)."""
        sem = asyncio.Semaphore(self.plan.concurrency)
        jobs: list[tuple[Suite, int, Task]] = []
        for suite in self.plan.suites.values():
            if per_round is not None and round_no is not None:
                picks = canary_sample(suite.tasks, per_round, round_no)
            else:
                picks = [(i + 1, t) for i, t in enumerate(suite.tasks)]
            jobs += [(suite, i, t) for i, t in picks]

        async def one(ordinal: int, suite: Suite, index: int, task: Task) -> list[ProbeResult]:
            async with sem:
                return await self._task(phase, suite, index, task, round_no, ordinal)

        first, self._sent = self._sent, self._sent + len(jobs)
        done = await asyncio.gather(*(one(first + n, s, i, t) for n, (s, i, t) in enumerate(jobs)))
        return [r for rs in done for r in rs]
