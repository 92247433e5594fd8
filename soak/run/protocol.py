"""The run's protocol (DESIGN.md §1): preflight → identity → watchers → before-load gates
→ the load plan (steady or matrix) → after-load gates. Finalize follows, always.

Each step receives the run's state and parts; none reaches into another. A stop or an
abort between steps skips what is left (the record says which phases ran).
"""

from __future__ import annotations

import asyncio

from loadgen.prompts import PromptPool, synthetic
from probes.gates import GatePlan
from probes.probe import ProbeOptions
from probes.suite import load_suites
from soak.record.matrix import parse_matrix
from soak.record.models import write_atomic
from soak.run.gate_session import GateSession
from soak.run.identity import build_identity, count_tokens
from soak.run.matrix_run import MatrixRun
from soak.run.mix_setup import class_pools
from soak.run.request_sink import RequestSink
from soak.run.state import RunParts
from soak.run.steady_load import SteadyLoad
from soak.run.stops import RunControls
from soak.run.telemetry import start_watchers
from soak.run.trace_setup import trace_pool


class RunProtocol:
    """The phases of one run, in order."""

    def __init__(
        self,
        parts: RunParts,
        sink: RequestSink,
        controls: RunControls,
        headers: dict[str, str],
    ) -> None:
        self.parts = parts
        self.state = parts.state
        self.sink = sink
        self.controls = controls
        self.headers = headers

    def _go_on(self) -> bool:
        return not self.state.preflight_errors and self.state.stop_asked is None

    async def run(self) -> None:
        """Every phase the run gets to; the caller finalizes whatever happened."""
        st, cfg = self.state, self.state.config
        self._preflight()
        if self._go_on() and cfg.ray is not None:  # one host per shard, before any load
            from soak.run.ray_shards import ray_preflight  # Ray: an optional extra

            await ray_preflight(st)
        if self._go_on():
            if not cfg.matrix:  # the matrix builds one pool per cell
                st.pool = await self._calibrate_pool()
                st.class_pools = await class_pools(cfg, self.headers)  # a mix's, if any
            self._write_identity()  # before the load: `soaktop recover` has it if we die
        if not self._go_on():
            return
        await start_watchers(self.parts, self.headers)
        if cfg.gates:
            self.parts.gates = self.controls.gates = self._gate_session()
            await self._gate_phase("before")
            if self.parts.gates.failed("before") and not cfg.force_load:
                st.before_blocked = True
                st.events.emit(
                    "gate",
                    "before-load gates failed: no load will run (--force-load soaks anyway)",
                    "error",
                )
        if st.before_blocked or st.stop_asked is not None:
            return
        if cfg.matrix:
            spec = parse_matrix(cfg.matrix)
            self.parts.window.open(st.now_s())  # the matrix is the load's window
            await MatrixRun(self.parts, self.sink, spec, self.headers).run()
            self.parts.window.close(st.now_s())
        else:
            await SteadyLoad(self.parts, self.sink, self.controls, self.headers).run()
        if self.parts.gates is not None and not st.hard_stop:
            await self._gate_phase("after")

    def _preflight(self) -> None:
        """Every endpoint answered, serves the model, and said so in words we can keep."""
        st = self.state
        for ep in st.endpoints:
            ep.url = st.redactor.text(ep.url)
            ep.error = st.redactor.text(ep.error) if ep.error else None
            if not ep.reachable:
                st.preflight_errors.append(f"endpoint {ep.url} unreachable: {ep.error}")
            elif ep.error:
                st.preflight_errors.append(f"endpoint {ep.url}: {ep.error}")
            elif st.config.model not in {m.id for m in ep.models}:
                served = ", ".join(str(m.id) for m in ep.models) or "none"
                st.preflight_errors.append(
                    f"model {st.config.model!r} is not served by {ep.url} (serves: {served})"
                )
        for ep in st.endpoints:
            st.events.emit(
                "identity",
                f"{ep.url}: "
                + (
                    f"{ep.engine or '?'} {ep.version or ''}".strip()
                    if ep.reachable
                    else f"unreachable ({ep.error})"
                ),
                "info" if ep.reachable else "error",
            )

    async def _calibrate_pool(self) -> PromptPool:
        st = self.state
        if st.pool is not None:
            return st.pool
        cfg = st.config
        if cfg.arrival == "trace":  # the trace's text material, calibrated
            return await trace_pool(cfg, self.headers)
        base = cfg.endpoints[0]

        async def counter(text: str) -> int | None:
            return await count_tokens(base, cfg.model, text, self.headers)

        return await synthetic(
            count=cfg.pool_size,
            target_tokens=cfg.synthetic_input_tokens or 128,
            seed=cfg.pool_seed,
            unique_prefix=not cfg.shared_prefix,
            count_tokens=counter,
        )

    def _write_identity(self) -> None:
        identity = build_identity(self.state, self.parts.watchers)
        try:
            write_atomic(
                self.state.run_dir / "identity.json",
                identity.model_dump_json(indent=2).encode(),
            )
        except OSError as e:
            self.controls.storage_failed("identity.json", e)

    # -- contract gates ------------------------------------------------------------------

    def _gate_session(self) -> GateSession:
        st, cfg = self.state, self.state.config
        plan = GatePlan(
            run_id=st.run_id,
            endpoints=list(cfg.endpoints),
            suites=load_suites(cfg.gates, cfg.suite_files),
            origin_ns=st.origin_ns,
            concurrency=cfg.probe_concurrency,
            retries=cfg.probe_retries,
        )
        lens = [
            m.max_model_len
            for ep in st.endpoints
            for m in ep.models
            if m.id == cfg.model and m.max_model_len
        ]
        options = ProbeOptions(
            model=cfg.model,
            check_expected=cfg.probe_expected,
            timeout_s=cfg.probe_timeout_s,
            max_model_len=min(lens) if lens else None,
        )
        session = GateSession(
            run_dir=st.run_dir,
            plan=plan,
            options=options,
            headers=self.headers,
            events=st.events,
            redactor=st.redactor,
            server_logs=list(cfg.server_log),
            evidence_all=cfg.probe_evidence == "all",
        )
        session.journal.on_error = self.controls.journal_failed
        session.on_storage_error = self.controls.storage_failed
        return session

    async def _gate_phase(self, phase: str) -> None:
        """One before/after gate phase, with the engine counters around it."""
        st, gates, engines = self.state, self.parts.gates, self.parts.watchers.engines
        assert gates is not None
        st.enter(f"{phase}_gates", f"{phase}-load contract gates: {', '.join(st.config.gates)}")
        start = await engines.scrape_all() if engines else None
        if st.hard_stop:  # an abort that came during the scrape: send nothing more
            st.events.emit("gate", f"{phase}-load gates skipped: the run was aborted", "warning")
            return
        if phase == "before" and st.stop_asked is not None:  # a stop during the scrape
            st.events.emit("gate", "before-load gates skipped: the run was stopped", "warning")
            return
        task = asyncio.create_task(gates.run(phase))
        self.controls.cancel_on_abort.add(task)
        try:
            await task
        except asyncio.CancelledError:
            if not st.hard_stop:
                raise
            st.events.emit("gate", f"{phase}-load gates cut short by an abort", "warning")
            return
        finally:
            self.controls.cancel_on_abort.discard(task)
        if engines is not None and start is not None and phase not in gates.cut_phases:
            st.gate_counters[phase] = (start, await engines.settled_counters())
