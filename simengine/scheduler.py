"""The engine model of one replica: continuous batching with a paged KV cache.

One asyncio task steps the engine, like vLLM's EngineCore busy loop. Each step:

1. every running sequence reserves the KV slot for its next token; when no block is free,
   the newest running sequence is preempted (recompute: back to the front of the queue,
   its blocks freed, re-prefilled later);
2. if nothing was preempted, waiting sequences are admitted FIFO while a running slot
   (``max_num_seqs``), KV blocks and the step's prefill budget allow;
3. the step takes ``decode_ms_base + decode_ms_per_seq × running`` plus the prefill cost
   of the admitted prompts;
4. every running sequence emits one token: stream chunks are written straight to the
   client's transport here (no task or future per token), which is what lets one core
   carry a thousand streams.

Handlers only wait on one future per request (``Sequence.done``). With an
:class:`~simengine.endurance.Endurance` (the slow scenarios, the noise) a step is also
stretched by its factor, KV blocks leak out of the free pool, and a new request's first
token may be held back (slow-leak's creeping prefill).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from simengine import wire
from simengine.config import SimConfig
from simengine.endurance import Endurance
from simengine.metrics import EngineMetrics
from simengine.sequence import Sequence
from simengine.simlog import ReplicaLog


class Scheduler:
    """Waiting queue, running batch, KV blocks and the stepping loop of one engine."""

    def __init__(
        self,
        cfg: SimConfig,
        metrics: EngineMetrics,
        log: ReplicaLog,
        endurance: Endurance | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.log = log
        self.endurance = endurance
        """The slow scenario and noise (None: a steady engine)."""
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.free_blocks = cfg.num_gpu_blocks
        self.leaked_blocks = 0
        """KV blocks slow-leak took out of the pool for good."""
        # A leak never leaves less than one max-length request needs (it would wait forever).
        self._leak_limit = cfg.num_gpu_blocks - (-(-(cfg.max_model_len + 1) // cfg.block_size))
        self.dead = False
        self._wake = asyncio.Event()
        self._last_emit_t = 0.0
        self._last_sweep = 0.0
        # Interval totals for the periodic "Avg prompt throughput" line.
        self.interval_prompt_tokens = 0
        self.interval_generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0

    # -- state seen by /load, DCGM and the log ---------------------------------------------
    @property
    def kv_usage(self) -> float:
        """Used fraction of KV blocks (0..1)."""
        total = self.cfg.num_gpu_blocks
        return (total - self.free_blocks) / total

    def queue_full(self) -> bool:
        """True when ``max_num_queued_reqs`` forbids one more waiting request."""
        limit = self.cfg.max_num_queued_reqs
        return limit is not None and len(self.waiting) >= limit

    def submit(self, seq: Sequence) -> None:
        """Queue a request; the loop admits it at its next step."""
        self.waiting.append(seq)
        self.metrics.waiting.set(len(self.waiting))
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Step until the engine dies or the task is cancelled."""
        loop = asyncio.get_running_loop()
        planned = loop.time()
        while not self.dead:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                planned = loop.time()
                self._last_emit_t = planned
                continue
            now = loop.time()
            if now - self._last_sweep > 1.0:
                self._last_sweep = now
                self._sweep_waiting()
            step_s = self._plan_step()
            # Keep the step cadence even when the event loop wakes us late, but do not
            # race to catch up after a long stall of the process.
            planned = max(planned + step_s, now + step_s * 0.5)
            await asyncio.sleep(planned - now)
            if self.dead:
                return
            self._emit(loop.time())

    def _sweep_waiting(self) -> None:
        # vLLM aborts a queued request as soon as its client disconnects; without this a
        # client that timed out would sit in the waiting gauge until it reached the head.
        if not any(s.client_gone() for s in self.waiting):
            return
        keep: deque[Sequence] = deque()
        for seq in self.waiting:
            if seq.client_gone():
                self._abort(seq)
            else:
                keep.append(seq)
        self.waiting = keep
        self.metrics.waiting.set(len(keep))

    def _plan_step(self) -> float:
        cfg = self.cfg
        bs = cfg.block_size
        running = self.running
        if self.endurance is not None:
            self._leak(self.endurance)
        preempted = False
        i = 0
        while i < len(running):
            seq = running[i]
            if seq.prefill_pending or seq.stall_until:
                i += 1
                continue
            if seq.prompt_tokens + seq.generated + 1 > seq.blocks * bs:
                if self.free_blocks == 0:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    continue  # retry the same index (or stop if it was the victim)
                seq.blocks += 1
                self.free_blocks -= 1
            i += 1
        prefill_tokens = 0
        if not preempted:
            prefill_tokens = self._admit()
        m = self.metrics
        m.running.set(len(running))
        m.waiting.set(len(self.waiting))
        m.kv_usage.set(self.kv_usage)
        decode = sum(1 for s in running if not s.prefill_pending)
        ms = cfg.decode_ms_base + cfg.decode_ms_per_seq * decode
        step_s = (ms + cfg.prefill_us_per_token * prefill_tokens / 1000.0) / 1000.0
        if self.endurance is not None:
            step_s *= self.endurance.step_factor()
        return step_s

    def _leak(self, endurance: Endurance) -> None:
        """slow-leak: move free blocks into the leaked pile, up to the curve's share."""
        share = endurance.kv_leak_share()
        if not share:
            return
        want = min(int(share * self.cfg.num_gpu_blocks), self._leak_limit)
        take = min(want - self.leaked_blocks, self.free_blocks)
        if take > 0:
            self.free_blocks -= take
            self.leaked_blocks += take

    def _admit(self) -> int:
        cfg = self.cfg
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        used = 0
        waiting = self.waiting
        now = time.monotonic()
        hold = self.endurance.prefill_hold_s() if self.endurance is not None else 0.0
        while waiting and len(self.running) < cfg.max_num_seqs:
            seq = waiting[0]
            if seq.client_gone():
                waiting.popleft()
                self._abort(seq)
                continue
            tokens = seq.prompt_tokens + seq.generated
            compute = tokens - (seq.prefix_hit if not seq.prompt_counted else 0)
            if used and used + compute > budget:
                break
            need = -(-(tokens + 1) // bs)
            if need > self.free_blocks:
                break
            waiting.popleft()
            self.free_blocks -= need
            seq.blocks = need
            seq.prefill_pending = True
            if seq.scheduled_t == 0.0:
                seq.scheduled_t = now
                if hold:  # slow-leak's creeping prefill: the first token waits longer
                    seq.stall_until = now + hold
            self.running.append(seq)
            used += compute
        return used

    def _preempt(self, seq: Sequence) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0
        seq.prefill_pending = False
        self.waiting.appendleft(seq)
        self.metrics.preemptions.inc()

    # -- emission ---------------------------------------------------------------------------
    def _emit(self, loop_now: float) -> None:
        now = time.monotonic()
        m = self.metrics
        batch_gap = loop_now - self._last_emit_t
        same_gap = 0
        emitted = 0
        keep: list[Sequence] = []
        for seq in self.running:
            if seq.client_gone():
                self._release(seq)
                self._abort(seq)
                continue
            if seq.stall_until:
                if now < seq.stall_until:
                    keep.append(seq)
                    continue
                seq.stall_until = 0.0
            i = seq.generated
            if i == seq.fault_at and not self._strike(seq, now):
                continue
            if seq.stall_until:
                keep.append(seq)
                continue
            if seq.prefill_pending:
                seq.prefill_pending = False
                if not seq.prompt_counted:
                    seq.prompt_counted = True
                    self._count_prompt(seq)
            elif seq.last_loop_t == self._last_emit_t:
                same_gap += 1
            else:
                m.itl.observe_many(loop_now - seq.last_loop_t, 1)
            n_plan = len(seq.plan)
            last = i + 1 >= n_plan
            if seq.stream:
                data = seq.template.token(seq.frags[i])  # type: ignore[index]
                if i == 0 and seq.template.chat:
                    data = seq.template.role() + data
                if last:
                    data += seq.stream_tail(seq.plan.finish, i + 1)
                tr = seq.transport
                if tr is None or tr.is_closing():
                    self._release(seq)
                    self._abort(seq)
                    continue
                tr.write(data)
            if i == 0:
                seq.first_token_t = now
                m.ttft.observe(now - seq.arrival)
            seq.generated = i + 1
            seq.last_loop_t = loop_now
            emitted += 1
            if last:
                self._release(seq)
                self._finish(seq, seq.plan.finish, now)
            else:
                keep.append(seq)
        self.running = keep
        self._last_emit_t = loop_now
        m.itl.observe_many(batch_gap, same_gap)
        if emitted:
            m.generation_tokens.inc(emitted)
            self.interval_generation_tokens += emitted
        m.running.set(len(keep))
        m.kv_usage.set(self.kv_usage)

    def _count_prompt(self, seq: Sequence) -> None:
        # Once per request, when its prefill completes (a recompute does not count again).
        m = self.metrics
        m.prompt_tokens.inc(seq.prompt_tokens)
        m.prefix_queries.inc(seq.prompt_tokens)
        m.prefix_hits.inc(seq.prefix_hit)
        self.interval_prompt_tokens += seq.prompt_tokens
        self.prefix_queries += seq.prompt_tokens
        self.prefix_hits += seq.prefix_hit

    def _strike(self, seq: Sequence, now: float) -> bool:
        """Carry out a mid-stream fault before token ``seq.generated``; False: seq ended."""
        action = seq.fault.action if seq.fault is not None else ""
        self.log.warning("simengine.py:0", f"fault {action} injected into {seq.rid}")
        ended = seq.strike(now)
        if ended:
            self._release(seq)
            if ended == "error":
                self._finish(seq, "error", now)
            else:
                self._abort(seq)
        return not ended

    # -- endings ----------------------------------------------------------------------------
    def _release(self, seq: Sequence) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        m = self.metrics
        # The engine finishes a tool-calling answer with "stop"; "tool_calls" is API-level.
        m.success["stop" if reason == "tool_calls" else reason].inc()
        m.e2e.observe(now - seq.arrival)
        if seq.scheduled_t:
            m.queue_time.observe(seq.scheduled_t - seq.arrival)
        if seq.first_token_t:
            m.prefill_time.observe(seq.first_token_t - seq.scheduled_t)
            m.decode_time.observe(now - seq.first_token_t)
        m.req_prompt_tokens.observe(seq.prompt_tokens)
        m.req_gen_tokens.observe(seq.generated)
        seq.outcome = reason
        seq.resolve()

    def _abort(self, seq: Sequence) -> None:
        # A client that went away is not counted in request_success (vLLM does not either).
        seq.outcome = "abort"
        seq.resolve()

    def kill(self) -> None:
        """Engine death: every queued and running request ends with an engine error."""
        self.dead = True
        self._wake.set()
        for seq in [*self.running, *self.waiting]:
            seq.fail(wire.ENGINE_DEAD_MESSAGE)
        self.running.clear()
        self.waiting.clear()
        self.free_blocks = self.cfg.num_gpu_blocks
        self.leaked_blocks = 0
        self.metrics.running.set(0)
        self.metrics.waiting.set(0)
        self.metrics.kv_usage.set(0)
