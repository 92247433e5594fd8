"""The matrix profile, the run's other load plan: per cell a warm-up, then R timed repetitions
of K requests at the cell's concurrency, each bounded by engine counter snapshots.

Every request is journaled in ``requests.jsonl`` (phase ``warmup`` or ``matrix``; its id
names the cell and repetition: ``<run>/matrix/c<cell>/r<rep>/<n>``), so the record's
per-repetition lists can be recomputed from the journal (``matrix_from_journal``). Engine
occupancy and free GPU memory are sampled during each repetition (a scrape every 0.25 s
while requests are out), beside the client's concurrency: two different numbers.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, PromptPool, synthetic
from loadgen.workers import LoadGenerator, LoadPlan
from soak.judge.reconcile import reconcile_window
from soak.record.journal import read_jsonl, request_line
from soak.record.matrix import (
    CellResult,
    MatrixSpec,
    MatrixSummary,
    RepResult,
    parse_matrix,
    pool_cell,
)
from soak.record.snapshot import MatrixCellNow, MatrixProgress
from soak.run.identity import count_tokens
from soak.run.request_sink import RequestSink
from soak.run.state import MatrixBatch, RunParts, RunState
from soak.watch.gpu.sources import gpu_entries

SAMPLE_S = 0.25
_ID = re.compile(r"/matrix/c(\d+)/(r(\d+)|warmup)/\d+$")


def request_prefix(run_id: str, cell: int, rep: int | None) -> str:
    """The request-id prefix of a cell's repetition (``rep`` None: its warm-up)."""
    return f"{run_id}/matrix/c{cell}/{'warmup' if rep is None else f'r{rep}'}"


def parse_request_id(request_id: str) -> tuple[int, int | None] | None:
    """(cell, rep) from a matrix request id (rep None: warm-up); None for other ids."""
    m = _ID.search(request_id)
    if m is None:
        return None
    return int(m.group(1)), (int(m.group(3)) if m.group(3) else None)


class MatrixRun:
    """The matrix profile as the run's load plan: it writes the cells, the current batch's
    generator and the request phase into the run's state, and its requests go to the same
    sink as a steady load's."""

    def __init__(
        self, parts: RunParts, sink: RequestSink, spec: MatrixSpec, headers: dict[str, str]
    ) -> None:
        self.parts = parts
        self.state = parts.state
        self.sink = sink
        self.spec = spec
        self.headers = headers
        cfg = self.state.config
        self.summary = MatrixSummary(
            spec=spec, max_tokens=cfg.max_tokens, reasoning=cfg.reasoning_effort
        )
        self.state.matrix = self.summary  # a crash mid-matrix still records the cells done
        self.bodies = BodyBuilder(
            model=cfg.model,
            api=cfg.api,
            max_tokens=cfg.max_tokens,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
            extra=cfg.body_extra(),
            max_tokens_field=cfg.max_tokens_field,
        )

    async def run(self) -> MatrixSummary:
        """Every cell in order; a stop or abort leaves the remaining cells ``not_run``."""
        cells = self.spec.cells()
        for index, (tokens, concurrency) in enumerate(cells):
            if self.state.stop_asked is not None:
                self.summary.not_run += [f"~{n} / C{c}" for n, c in cells[index:]]
                break
            cell = CellResult(
                index=index,
                input_tokens_target=tokens,
                concurrency=concurrency,
                prompt_pool_sha256="",
            )
            self.state.matrix_cells.append(cell)  # live: its reps time the faults
            await self._cell(cell)
            self.summary.cells.append(pool_cell(cell))
        return self.summary

    async def _pool(self, tokens: int, count: int) -> PromptPool:
        cfg = self.state.config
        base = cfg.endpoints[0]

        async def counter(text: str) -> int | None:
            return await count_tokens(base, cfg.model, text, self.headers)

        # Seeded by the pool seed and the cell's target: the same prompts in every arm.
        return await synthetic(
            count=count,
            target_tokens=tokens,
            seed=cfg.pool_seed * 1_000_003 + tokens,
            unique_prefix=True,
            count_tokens=counter,
        )

    async def _cell(self, cell: CellResult) -> None:
        spec, st = self.spec, self.state
        index, tokens, concurrency = cell.index, cell.input_tokens_target, cell.concurrency
        warm = spec.warmup * concurrency
        pool = await self._pool(tokens, warm + spec.reps * spec.requests)
        cell.prompt_pool_sha256 = pool.sha256
        cell.warmup_requests = warm
        label = f"~{tokens} / C{concurrency}"
        # Counted from 1 as the monitor's progress line says it ("cell 2/4"); the event's
        # data keeps the 0-based index the request ids use (c<index>).
        nth = f"{index + 1}/{len(spec.cells())}"
        prompts = iter(pool.prompts)
        if warm:
            st.enter(
                "warmup",
                f"cell {nth} ({label}): {warm} warm-up requests, untimed",
                cell=index,
                pool_sha256=pool.sha256,
            )
            st.request_phase = "warmup"
            results = await self._batch(index, None, concurrency, _take(prompts, warm), pool)
            cell.warmup_failed = sum(1 for r in results if r.failure is not None)
        for rep in range(1, spec.reps + 1):
            if st.stop_asked is not None:
                break
            st.enter(
                "matrix",
                f"cell {nth} ({label}) rep {rep}/{spec.reps}",
                cell=index,
                rep=rep,
                pool_sha256=pool.sha256,
            )
            st.request_phase = "matrix"
            cell.reps.append(
                await self._rep(index, rep, concurrency, _take(prompts, spec.requests), pool)
            )

    async def _rep(
        self, cell: int, rep: int, concurrency: int, prompts: tuple[Any, ...], pool: PromptPool
    ) -> RepResult:
        engines = self.parts.watchers.engines
        before = await engines.settled_counters(pause_s=0.25) if engines else None
        peaks: dict[str, float] = {}
        sampler = asyncio.create_task(self._sample(peaks))
        start = self.state.now_s()
        try:
            results = await self._batch(cell, rep, concurrency, prompts, pool)
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        end = self.state.now_s()
        after = await engines.settled_counters(pause_s=0.25) if engines else None
        out = rep_from_results(rep, results, self.state.origin_ns)
        out.start_s, out.end_s = start, end
        out.max_running = peaks.get("running")
        out.min_free_mib = peaks.get("min_free_mib")
        failed = out.failed + sum(1 for r in results if r.cancelled)
        out.reconciliation = reconcile_window(
            before,
            after,
            {
                "requests": out.completed,
                "prompt_tokens": sum(v or 0 for v in out.input_tokens),
                "generation_tokens": sum(v or 0 for v in out.output_tokens),
            },
            f"cell {cell} rep {rep}",
            failed,
            engines.restarts if engines else None,  # a restart inside: unavailable, not a gap
            self.state.load_start_s(),
        )
        return out

    async def _sample(self, peaks: dict[str, float]) -> None:
        """Engine occupancy (running, all endpoints) and the lowest free GPU memory."""
        st, watchers = self.state, self.parts.watchers
        while True:
            gen = st.gen
            if gen is None or gen.state.in_flight == 0:
                # sample while requests are out: between batches the engine reads idle
                await asyncio.sleep(0.01)
                continue
            if watchers.engines is not None:
                samples = await watchers.engines.scrape_all()
                running = [s.values.get("running") for s in samples if s.error is None]
                total = sum(v for v in running if v is not None) if running else None
                if total is not None and total > peaks.get("running", -1.0):
                    peaks["running"] = total
            for g in gpu_entries(watchers.gpu_sources, "view") if watchers.gpu_sources else []:
                free = g.get("memory_free_mib")
                if isinstance(free, int | float) and free < peaks.get("min_free_mib", 1e18):
                    peaks["min_free_mib"] = float(free)
            await asyncio.sleep(SAMPLE_S)

    async def _batch(
        self,
        cell: int,
        rep: int | None,
        concurrency: int,
        prompts: tuple[Any, ...],
        pool: PromptPool,
    ) -> list[RequestResult]:
        """``len(prompts)`` requests, closed loop at ``concurrency`` (at most one per prompt)."""
        st, cfg = self.state, self.state.config
        results: list[RequestResult] = []
        # The snapshot tick counts this list for the live progress (no work per request).
        st.matrix_batch = MatrixBatch(cell=cell, rep=rep, requests=len(prompts), results=results)

        def on_result(r: RequestResult) -> None:
            results.append(r)
            self.sink.on_result(r)

        plan = LoadPlan(
            endpoints=tuple(cfg.endpoints),
            concurrency=min(concurrency, len(prompts)),
            duration_s=None,
            max_requests=len(prompts),
            drain_timeout_s=cfg.drain_timeout_s,
            barrier_timeout_s=cfg.barrier_timeout_s,
            request_id_prefix=request_prefix(st.run_id, cell, rep),
            backoff_max_s=cfg.failure_backoff_max_s,
        )
        sub = PromptPool(prompts, source=pool.source, unique_prefix=True)
        async with StreamClient(
            max_connections=concurrency + 4,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            headers=self.headers,
            sanity_checks=cfg.sanity_checks,
            ignore_eos=cfg.ignore_eos,
        ) as client:
            gen = LoadGenerator(plan, client, sub, self.bodies, on_result)
            st.gen = gen
            if st.matrix_start_ns is None:
                st.matrix_start_ns = time.perf_counter_ns()
            started = await gen.start_workers()
            if started and st.stop_asked is None:
                await gen.run()
            else:
                await gen.cancel_unstarted()
                if not started:  # nothing was sent: say so, never an empty "clean" batch
                    why = "; ".join(f"{n}× {m}" for m, n in gen.state.start_failures.items())
                    where = "warm-up" if rep is None else f"rep {rep}"
                    self.summary.barrier_failures.append(
                        f"cell {cell} {where}: {gen.state.workers_started} of "
                        f"{plan.concurrency} workers started ({st.redactor.text(why)})"
                    )
        return results


def matrix_progress(st: RunState) -> MatrixProgress | None:
    """Where the matrix stands, for the snapshot (None: not a matrix run). Folded at the
    tick from what the matrix run keeps anyway: the cells so far (``matrix_cells``, the
    pooled ``matrix.cells``) and the current batch's finished requests."""
    summary = st.matrix
    if summary is None:
        return None
    spec, batch = summary.spec, st.matrix_batch
    cell = st.matrix_cells[-1] if st.matrix_cells else None
    total = len(spec.cells())
    out = MatrixProgress(
        cells=total,
        reps=spec.reps,
        requests=spec.requests,
        phase="preparing",
        finished=[
            MatrixCellNow(
                index=c.index,
                label=c.label,
                e2e_median_s=c.e2e_median_s,
                ttft_content_median_s=c.ttft_content_median_s,
                completed=c.completed,
                failed=c.failed,
                input_tokens_mean=c.input_tokens_mean,
            )
            for c in summary.cells
        ],
    )
    if cell is not None:
        out.cell, out.label = cell.index, cell.label
        out.input_tokens_target, out.concurrency = cell.input_tokens_target, cell.concurrency
    if len(summary.cells) + len(summary.not_run) >= total:
        out.phase = "done"  # every cell ran, or the run stopped before the rest
    elif cell is not None and batch is not None and batch.cell == cell.index:
        out.phase, out.rep = ("warmup", None) if batch.rep is None else ("rep", batch.rep)
        out.batch_requests = batch.requests
        out.batch_done = sum(1 for r in batch.results if r.failure is None)
        out.batch_failed = sum(
            1 for r in batch.results if r.failure is not None and not r.cancelled
        )
    return out


def _take(it: Iterator[Any], n: int) -> tuple[Any, ...]:
    return tuple(next(it) for _ in range(n))


def rep_from_results(rep: int, results: list[RequestResult], origin_ns: int) -> RepResult:
    """A repetition's figures from its requests, through their journal lines (so the
    record and ``matrix_from_journal`` see the very same numbers)."""
    return rep_from_lines(rep, [orjson.loads(request_line(r, origin_ns)) for r in results])


def rep_from_lines(rep: int, lines: list[dict[str, Any]]) -> RepResult:
    """A repetition's figures from its ``requests.jsonl`` lines."""
    out = RepResult(rep=rep)
    for line in lines:
        if line.get("ok"):
            out.completed += 1
            out.e2e_s.append(float(line["e2e_s"]))
            out.ttft_content_s.append(line.get("first_content_s"))
            out.ttft_first_output_s.append(line.get("ttft_s"))
            out.input_tokens.append(line.get("prompt_tokens"))
            out.output_tokens.append(line.get("output_tokens"))
        elif not line.get("cancelled"):
            out.failed += 1
            cls = str(line.get("failure"))
            out.failures_by_class[cls] = out.failures_by_class.get(cls, 0) + 1
    return out


def matrix_from_journal(run_dir: Path, recorded: MatrixSummary) -> MatrixSummary:
    """The record's matrix with every repetition's request figures recomputed from
    ``requests.jsonl`` (the sampled occupancy, memory and reconciliation are kept)."""
    by_rep: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for line in read_jsonl(run_dir / "requests.jsonl"):
        key = parse_request_id(str(line.get("id", "")))
        if key is not None and key[1] is not None:
            by_rep.setdefault((key[0], key[1]), []).append(line)
    cells = []
    for cell in recorded.cells:
        reps = []
        for r in cell.reps:
            again = rep_from_lines(r.rep, by_rep.get((cell.index, r.rep), []))
            reps.append(
                again.model_copy(
                    update={
                        k: getattr(r, k)
                        for k in ("start_s", "end_s", "max_running", "min_free_mib")
                    }
                    | {"reconciliation": r.reconciliation}
                )
            )
        cells.append(pool_cell(cell.model_copy(update={"reps": reps})))
    return recorded.model_copy(update={"cells": cells})


def matrix_from_journals(run_dir: Path, config: dict[str, Any]) -> MatrixSummary | None:
    """For ``soaktop recover``: the matrix of a runner that died, from its journals (the
    cells' pools from the phase events, every repetition from ``requests.jsonl``; the
    sampled occupancy, memory and reconciliation are lost with the runner)."""
    if not config.get("matrix"):
        return None
    spec = parse_matrix(str(config["matrix"]))
    pools: dict[int, str] = {}
    for ev in read_jsonl(run_dir / "events.jsonl"):
        data = ev.get("data") or {}
        if ev.get("kind") == "phase" and "cell" in data and "pool_sha256" in data:
            pools[int(data["cell"])] = str(data["pool_sha256"])
    reps: dict[int, dict[int, list[dict[str, Any]]]] = {}
    warm: dict[int, list[dict[str, Any]]] = {}
    for line in read_jsonl(run_dir / "requests.jsonl"):
        key = parse_request_id(str(line.get("id", "")))
        if key is None:
            continue
        if key[1] is None:
            warm.setdefault(key[0], []).append(line)
        else:
            reps.setdefault(key[0], {}).setdefault(key[1], []).append(line)
    summary = MatrixSummary(
        spec=spec,
        max_tokens=int(config.get("max_tokens", 0)),
        reasoning=config.get("reasoning_effort"),
    )
    for index, (tokens, concurrency) in enumerate(spec.cells()):
        if index not in pools:
            summary.not_run.append(f"~{tokens} / C{concurrency}")
            continue
        cell = CellResult(
            index=index,
            input_tokens_target=tokens,
            concurrency=concurrency,
            prompt_pool_sha256=pools[index],
            warmup_requests=spec.warmup * concurrency,
            warmup_failed=sum(1 for ln in warm.get(index, []) if not ln.get("ok")),
            reps=[rep_from_lines(r, lines) for r, lines in sorted(reps.get(index, {}).items())],
        )
        summary.cells.append(pool_cell(cell))
    return summary
