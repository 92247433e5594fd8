"""The runner's contract gates: before, canary and after phases into the run directory.

Every probe attempt becomes a line of ``probes.jsonl`` (the record's gates are computed
from it, so ``soaktop verify`` can recompute them) and an event; every failed attempt
(every attempt, with ``probe_evidence = all``) also writes
``evidence/<phase>-<suite>-<n>.json``: the full request, the response (or
the partial stream), the reason and, when a server log is configured, its tail at that
moment with the lines that name the request id marked.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from loadgen.tls import verify
from probes.gates import PHASE_WORDS, GatePlan, GateRunner, SuiteGate, summarize
from probes.probe import ProbeOptions, ProbeSender
from probes.probe_record import Exchange, Outcome, ProbeResult
from probes.suite import Suite, Task
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.record.models import write_atomic
from soak.record.redact import Redactor
from soak.run.redaction import RedactingWriter

LOG_TAIL_BYTES = 64 * 1024
LOG_TAIL_LINES = 200


def server_log_excerpt(path: Path, request_id: str) -> dict[str, Any]:
    """The last lines of a server log (lines naming ``request_id`` listed apart)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            data = fh.read()
    except OSError as e:
        return {"path": str(path), "error": f"cannot read: {e.strerror}"}
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > LOG_TAIL_BYTES:
        lines = lines[1:]  # the first line is probably cut
    tail = lines[-LOG_TAIL_LINES:]
    # The id itself or its steps (.call/.answer), never json/1 matching json/10 or json/1.r1.
    own = re.compile(re.escape(request_id) + r"(?:\.(?:call|answer))?(?![\w.])")
    return {
        "path": str(path),
        "tail": tail,
        "matching_request_id": [ln for ln in lines if own.search(ln)],
    }


STOP_GRACE_S = 5.0
"""After a graceful stop during a before/after gate phase, how long the probes already in
flight may take to finish; then they are cut (and count as not run, like unsent ones)."""


class _HaltableSender(ProbeSender):
    """A :class:`ProbeSender` that a stop can halt: once halted it sends nothing more (a
    task waits, unsent, until its phase is cancelled) and :meth:`settle` waits for the
    probes already on the wire."""

    def __init__(self, client: httpx.AsyncClient, options: ProbeOptions) -> None:
        super().__init__(client, options)
        self.halted = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def run(
        self, suite: Suite, task: Task, base: str, rid: str
    ) -> tuple[Outcome, str, str | None, list[Exchange]]:
        """Send the task as :meth:`ProbeSender.run`, unless halted."""
        if self.halted:
            await asyncio.Event().wait()  # never sent: cancelled with the phase
        self.in_flight += 1
        self._idle.clear()
        try:
            return await super().run(suite, task, base, rid)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def settle(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` for the probes in flight; True if they all finished."""
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except TimeoutError:
            return False
        return True


def evidence_name(r: ProbeResult) -> str:
    """``evidence/after-json-7.json`` (canary ``-round3``, retry ``-r1``)."""
    name = f"{r.phase}-{r.suite}-{r.index}"
    if r.round is not None:
        name += f"-round{r.round}"
    if r.attempt:
        name += f"-r{r.attempt}"
    return f"evidence/{name}.json"


class GateSession:
    """Runs gate phases for a runner and keeps their results."""

    def __init__(
        self,
        *,
        run_dir: Path,
        plan: GatePlan,
        options: ProbeOptions,
        headers: dict[str, str],
        events: EventLog,
        redactor: Redactor,
        server_logs: list[Path],
        evidence_all: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.events = events
        self.redactor = redactor
        self.server_logs = server_logs
        self.evidence_all = evidence_all
        self.journal = (
            RedactingWriter(run_dir / "probes.jsonl", redactor)
            if redactor.active
            else JsonlWriter(run_dir / "probes.jsonl")
        )
        self.on_storage_error: Callable[[str, OSError], None] | None = None
        """Called when an evidence file cannot be written (the runner stops the run)."""
        self.results: list[ProbeResult] = []
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(options.timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=plan.concurrency + 4),
            verify=verify(),  # loadgen.tls: the run's CA and client certificate
        )
        self._sender = _HaltableSender(self._client, options)
        self.runner = GateRunner(plan, self._sender, self._on_result)
        self._cut = asyncio.Event()
        self.cut_phases: set[str] = set()
        """Before/after phases that a graceful stop ended early (their counters are not
        reconciled: the server saw probes whose answers were cut)."""
        self.canary_rounds = 0
        self.running: str | None = None

    @property
    def suites(self) -> dict[str, Suite]:
        """The suites every phase runs."""
        return self.plan.suites

    def _on_result(self, r: ProbeResult, exchanges: list[Exchange]) -> None:
        if r.outcome != "pass" or self.evidence_all:
            r.evidence = self._write_evidence(r, exchanges)
        line = r.model_dump(mode="json")
        if self.redactor.active:  # free text only: keys and enum values stay readable
            line["reason"] = self.redactor.text(line["reason"])
        self.journal.write(line)
        self.results.append(r)
        if r.outcome != "pass":
            self.events.emit(
                "gate",
                f"{PHASE_WORDS[r.phase]} {r.label}: {r.outcome} — {r.reason}",
                "error",
                phase=r.phase,
                suite=r.suite,
                index=r.index,
                outcome=r.outcome,
                request_id=r.request_id,
                evidence=r.evidence,
            )

    def _write_evidence(self, r: ProbeResult, exchanges: list[Exchange]) -> str:
        rel = evidence_name(r)
        # One log per replica: the failed probe's own replica; otherwise every log given.
        paths = self.server_logs
        if len(paths) == len(self.plan.endpoints) > 1:
            paths = [paths[r.endpoint]]
        logs = [server_log_excerpt(p, r.request_id) for p in paths]
        kept = [e.as_evidence(self.redactor.body) for e in exchanges]
        doc: dict[str, Any] = {
            "probe": r.model_dump(mode="json") | {"evidence": rel},
            "exchanges": kept,
            "server_logs": logs or "no server log configured (--server-log PATH)",
        }
        if self.redactor.enabled:
            # Paths, hostnames and GPU ids in a server log's tail are the operator's, and
            # cannot all be recognised: keep only the lines naming this request.
            for log in logs:
                log["path"] = "<redacted>"
                log.pop("tail", None)
        if self.redactor.active:  # the bodies were scrubbed whole (as_evidence): the rest
            bodies = [x["response"].pop("body") for x in kept]
            doc = self.redactor.obj(doc)
            for x, body in zip(doc["exchanges"], bodies, strict=True):
                x["response"]["body"] = body
        path = self.run_dir / rel
        try:
            path.parent.mkdir(exist_ok=True)
            data = self.redactor.cut_secrets(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            write_atomic(path, data)
        except OSError as e:  # disk full: the probe's outcome still counts; the run stops
            if self.on_storage_error is None:
                raise
            self.on_storage_error(rel, e)
            return f"{rel} (not written: {e.strerror or e})"
        return rel

    async def run(self, phase: str) -> dict[str, SuiteGate]:
        """One full gate phase (``before`` or ``after``); its per-suite summary."""
        self.running = phase
        planned = {name: len(suite.tasks) for name, suite in self.suites.items()}
        # The plan goes on the timeline first: verify and recover count unsent tasks from it.
        self.events.emit("gate", f"{PHASE_WORDS[phase]} gates start", phase=phase, planned=planned)
        self._sender.halted = False
        self._cut.clear()
        try:
            results = await self._run_until_cut(phase)
        finally:
            self.running = None
        gates = summarize(results, {phase: planned}).get(phase, {})
        self.events.emit(
            "gate",
            f"{PHASE_WORDS[phase]} gates: "
            + ", ".join(f"{s} {g.passed}/{g.total}" for s, g in gates.items()),
            "info" if all(g.passed == g.total for g in gates.values()) else "error",
            phase=phase,
            counts={s: [g.passed, g.total] for s, g in gates.items()},
        )
        return gates

    def cut(self) -> None:
        """A graceful stop: end the before/after phase that is running now promptly — no
        new probe is sent, those in flight get :data:`STOP_GRACE_S` to finish, and the
        rest count as not run. A canary round is not cut (it ends as it always did)."""
        if self.running is not None:
            self._sender.halted = True
            self._cut.set()

    async def _run_until_cut(self, phase: str) -> list[ProbeResult]:
        """The phase's results: all of them, or those that ended before a :meth:`cut`."""
        work = asyncio.ensure_future(self.runner.run_phase(phase))
        cut = asyncio.ensure_future(self._cut.wait())
        try:
            await asyncio.wait({work, cut}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                return work.result()
            finished = await self._sender.settle(STOP_GRACE_S)
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        finally:
            for t in (work, cut):
                t.cancel()  # an abort that cancels us cancels the phase too
        self.cut_phases.add(phase)
        done = [r for r in self.results if r.phase == phase]
        tasks = sum(len(su.tasks) for su in self.suites.values())
        sent = len({(r.suite, r.index) for r in done})
        self.events.emit(
            "gate",
            f"{PHASE_WORDS[phase]} gates cut short by a stop: {sent} of {tasks} tasks ran, "
            f"{tasks - sent} not run"
            + ("" if finished else f" (probes still in flight after {STOP_GRACE_S:g} s were cut)"),
            "warning",
            phase=phase,
        )
        return done

    async def canary_loop(self, interval_s: float, per_round: int, stop: asyncio.Event) -> None:
        """Every ``interval_s``, a small rotating sample of each suite, until ``stop`` is set
        (a round that has begun runs to its end: its requests are in the counters)."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
                return
            except TimeoutError:
                pass
            self.canary_rounds += 1
            self.events.emit("gate", f"canary round {self.canary_rounds}", phase="canary")
            await self.runner.run_phase("canary", per_round=per_round, round_no=self.canary_rounds)

    def failed(self, phase: str) -> bool:
        """Whether any task of ``phase`` ended without passing."""
        gates = summarize([r for r in self.results if r.phase == phase]).get(phase, {})
        return any(g.passed < g.total for g in gates.values())

    def view(self) -> dict[str, Any]:
        """Live gate state for the snapshot: per phase and suite, done/total/passed/failed."""
        out: dict[str, Any] = {}
        for phase, suites in summarize(self.results).items():
            out[phase] = {
                name: {
                    "passed": g.passed,
                    "total": len(self.suites[name].tasks) if phase != "canary" else g.total,
                    "done": g.total,
                    "failed": g.total - g.passed,
                    "rounds": g.rounds,
                }
                for name, g in suites.items()
            }
        if self.running:
            for name, suite in self.suites.items():
                out.setdefault(self.running, {}).setdefault(
                    name,
                    {"passed": 0, "total": len(suite.tasks), "done": 0, "failed": 0},
                )
        return out

    async def aclose(self) -> None:
        """Close the HTTP client and the journal."""
        await self._client.aclose()
        self.journal.close()


def gate_plans(events_path: Path) -> dict[str, dict[str, int]]:
    """``{phase: {suite: planned tasks}}`` from the gate-phase start events."""
    plans: dict[str, dict[str, int]] = {}
    for ev in read_jsonl(events_path):
        data = ev.get("data") or {}
        if ev.get("kind") == "gate" and isinstance(data.get("planned"), dict):
            plans[str(data.get("phase"))] = {str(k): int(v) for k, v in data["planned"].items()}
    return plans


def gates_from_journal(
    run_dir: Path,
) -> tuple[dict[str, dict[str, SuiteGate]], list[str]]:
    """The record's gates, recomputed from ``probes.jsonl`` and the planned task counts in
    ``events.jsonl`` (finalize, recover, verify), and the lines that could not be read."""
    results: list[ProbeResult] = []
    problems: list[str] = []
    for n, line in enumerate(read_jsonl(run_dir / "probes.jsonl"), 1):
        try:
            results.append(ProbeResult.model_validate(line))
        except ValueError as e:
            problems.append(f"probes.jsonl line {n} is not a probe result: {str(e)[:200]}")
    return summarize(results, gate_plans(run_dir / "events.jsonl")), problems


def probe_accounting(path: Path) -> dict[str, dict[str, int]]:
    """Client-side requests and tokens per gate phase, for counter reconciliation."""
    out: dict[str, dict[str, int]] = {}
    for line in read_jsonl(path):
        acc = out.setdefault(
            line["phase"],
            {"requests": 0, "completed": 0, "prompt_tokens": 0, "completion_tokens": 0},
        )
        for k in acc:
            acc[k] += int(line.get(k) or 0)
    return out
