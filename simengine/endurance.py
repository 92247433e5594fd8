"""Endurance scenarios: slow, time-compressed degradation a soak must catch, and the
noise of a healthy engine that it must not mistake for one.

Every curve runs on the fault clock (:class:`simengine.faults.FaultBook`: seconds since
the first ``load`` request) and begins at the scenario's onset (``--scenario-at``, by
default :data:`simengine.faults.SCENARIO_ONSET_S`). ``t`` below is the time since the
onset multiplied by ``--scenario-speed`` (1 in the demo), so a test can compress a
two-minute story into seconds. The rates are compressed already: what a real leak does
in hours, these do in a minute or two, and they stop at a cap so a long run stays sane.

``slow-leak`` (onset 30 s)
    KV: 0.4 %/s × t of the KV blocks leak (cap 60 %): they leave the scheduler's free
    pool and never come back, so ``vllm:kv_cache_usage_perc`` creeps up at equal load and
    a heavy load meets preemptions. Memory: the process holds 4 MB/s × t more, pages
    touched so RSS shows it (cap 512 MB). FB_USED: follows the leaked blocks (the
    exporter maps KV usage onto each board) plus the held MB. TTFT: each new request's
    prefill is held 5 ms × t longer (cap 3 s), a queue/prefill delay growing linearly.
``throughput-decay`` (onset 30 s)
    Every engine step takes 1 + 1.5 %/s × t times as long (cap ×4): ITL grows linearly
    and output tok/s falls monotonically, as 1 / (1 + 0.015 t).
``garbage-after`` (onset 40 s)
    90 % of plain-text answers turn degenerate, with HTTP 200 and usage that counts what
    is sent: half a looping phrase ("the the the …", or 2–4 words over and over) to
    ``max_tokens``, a quarter a few words then runaway whitespace to ``max_tokens``, a
    quarter a tiny output (1–2 tokens, ``stop``) — what broken engines sent (vLLM #48089,
    #55313, #19493). Structured answers (JSON schema, tool calls) keep their grammar:
    constrained decoding masks the loop, so the gates still pass and only the load's
    sanity checks see it.
``--noise`` (the demo always sets it; ``healthy`` then has no trend, only noise)
    Every engine step is stretched by a lognormal factor (σ 0.10, about ±10 %): TTFT and
    ITL jitter. The process memory saws: +2 MB/s (× speed) from the first load request up
    to a peak drawn in 24–48 MB, then all freed at once (RSS comes back), like a
    collector. KV usage follows the load alone. ``--seed`` draws the jitter and the peaks.

The cost is small on purpose (the runner shares two cores): one multiply and, with
noise, one random draw per engine step; one memory tick every half second.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import random
from dataclasses import dataclass

from simengine.faults import FaultBook
from simengine.textgen import K_CONTENT, N_WORDS, VOCAB, OutputRequest, Plan, plain_text

_PAGE = mmap.PAGESIZE
_MB = 1 << 20
MEMORY_TICK_S = 0.5
"""How often the memory curves take or give back memory."""
WHITESPACE = ("    ", "\n", "  ", "\n\n", " ")
"""The tokens of a runaway-whitespace answer."""


@dataclass(frozen=True)
class Curves:
    """The rates and caps of the endurance scenarios (per second of ``t``)."""

    kv_leak_per_s: float = 0.004
    """slow-leak: share of the KV blocks leaked per second."""
    kv_leak_max: float = 0.6
    """slow-leak: the most of the KV cache that leaks."""
    rss_leak_mb_per_s: float = 4.0
    """slow-leak: process memory held per second (MB)."""
    rss_leak_max_mb: float = 512.0
    """slow-leak: the most process memory held (MB)."""
    ttft_hold_ms_per_s: float = 5.0
    """slow-leak: extra prefill wait per second (ms)."""
    ttft_hold_max_ms: float = 3000.0
    """slow-leak: the longest extra prefill wait (ms)."""
    step_growth_per_s: float = 0.015
    """throughput-decay: growth of every step's duration per second (share)."""
    step_growth_max: float = 4.0
    """throughput-decay: the largest step stretch (factor)."""
    garbage_share: float = 0.9
    """garbage-after: share of plain-text answers that degenerate."""
    jitter_sigma: float = 0.10
    """noise: σ of the lognormal factor on every step."""
    sawtooth_mb_per_s: float = 2.0
    """noise: how fast the memory sawtooth climbs (MB/s)."""
    sawtooth_peak_mb: tuple[float, float] = (24.0, 48.0)
    """noise: the range a sawtooth's peak is drawn from (MB)."""


CURVES = Curves()


def touched_block(n_bytes: int) -> mmap.mmap:
    """An anonymous mapping of ``n_bytes`` with one byte written per page, so the kernel
    backs every page (RSS shows it) and ``close()`` hands it all back at once."""
    n = max(_PAGE, -(-n_bytes // _PAGE) * _PAGE)
    block = mmap.mmap(-1, n)
    block[0:n:_PAGE] = b"\xa5" * (n // _PAGE)
    return block


class Endurance:
    """The slow effects of one process's scenario, shared by its replicas."""

    def __init__(
        self,
        scenario: str,
        clock: FaultBook,
        *,
        onset_s: float,
        speed: float = 1.0,
        noise: bool = False,
        seed: int = 0,
        curves: Curves = CURVES,
    ) -> None:
        self.curves = curves
        self.onset_s = onset_s
        self.speed = speed
        self.noise = noise
        self.leaks = scenario == "slow-leak"
        self.decays = scenario == "throughput-decay"
        self.garbles = scenario == "garbage-after"
        self._clock = clock
        self._jitter = random.Random(f"{seed}:jitter")
        self._saw_rng = random.Random(f"{seed}:sawtooth")
        self._held: list[mmap.mmap] = []
        self._churn: list[mmap.mmap] = []
        self.held_mb = 0.0
        """Memory the leak holds now (MB)."""
        self.churn_mb = 0.0
        """Memory the sawtooth holds now (MB)."""
        self._saw_peak_mb = self._next_peak()

    @property
    def active(self) -> bool:
        """True when anything here changes the engine (else the replicas skip it)."""
        return self.leaks or self.decays or self.garbles or self.noise

    def elapsed_s(self) -> float | None:
        """Seconds since the first load request (None before it)."""
        return self._clock.elapsed_since_load()

    def degraded_s(self) -> float:
        """``t``: compressed seconds since the onset (0 before it, or before any load)."""
        e = self._clock.elapsed_since_load()
        if e is None or e <= self.onset_s:
            return 0.0
        return (e - self.onset_s) * self.speed

    # -- what the scheduler asks every step ---------------------------------------------------
    def step_factor(self) -> float:
        """How much longer this engine step takes than the config says."""
        factor = 1.0
        if self.decays:
            c = self.curves
            factor += min(c.step_growth_per_s * self.degraded_s(), c.step_growth_max - 1.0)
        if self.noise:
            factor *= self._jitter.lognormvariate(0.0, self.curves.jitter_sigma)
        return factor

    def prefill_hold_s(self) -> float:
        """Extra wait before a new request's first token (slow-leak's TTFT creep)."""
        if not self.leaks:
            return 0.0
        c = self.curves
        return min(c.ttft_hold_ms_per_s * self.degraded_s(), c.ttft_hold_max_ms) / 1000.0

    def kv_leak_share(self) -> float:
        """Share of the KV blocks that should have leaked by now."""
        if not self.leaks:
            return 0.0
        c = self.curves
        return min(c.kv_leak_per_s * self.degraded_s(), c.kv_leak_max)

    def fb_leak_mib(self) -> float:
        """Device memory the leak holds on every board, beyond the KV blocks (MiB)."""
        return self.held_mb if self.leaks else 0.0

    # -- what the API asks of every answer ----------------------------------------------------
    def garble(
        self, req: OutputRequest, rng: random.Random
    ) -> tuple[Plan, list[int] | None] | None:
        """A degenerate plain-text answer in place of the planned one, or None to keep it.

        Only after garbage-after's onset, and for ``garbage_share`` of the answers; the
        draw uses the request's own random stream, so a request id decides its fate.
        """
        if not self.garbles or self.degraded_s() <= 0.0:
            return None
        if rng.random() >= self.curves.garbage_share:
            return None
        cap = max(req.max_tokens, 1)
        kind = rng.random()
        if kind < 0.25 and not req.ignore_eos:  # a tiny answer: EOS after a word or two
            idx, texts = plain_text(rng, min(rng.randint(1, 2), cap))
            return Plan([K_CONTENT] * len(texts), texts, "stop"), idx
        lead = min(rng.randint(0, 8) if kind >= 0.5 else rng.randint(2, 12), cap)
        idx, texts = plain_text(rng, lead)
        if kind < 0.5:  # runaway whitespace until the cap
            texts += [rng.choice(WHITESPACE) for _ in range(cap - lead)]
            return Plan([K_CONTENT] * len(texts), texts, "length"), None
        phrase = rng.choices(range(N_WORDS), k=rng.choice((1, 1, 2, 3, 4)))
        idx += [phrase[i % len(phrase)] for i in range(cap - lead)]
        texts = [VOCAB[i] for i in idx]
        return Plan([K_CONTENT] * len(texts), texts, "length"), idx

    # -- the memory curves --------------------------------------------------------------------
    async def run_memory(self) -> None:
        """Hold and release memory for the leak and the sawtooth (until cancelled)."""
        try:
            while True:
                await asyncio.sleep(MEMORY_TICK_S)
                self.memory_tick()
        finally:
            self.release()

    def memory_tick(self) -> None:
        """One step of the memory curves."""
        if self.leaks:
            c = self.curves
            want = min(c.rss_leak_mb_per_s * self.degraded_s(), c.rss_leak_max_mb)
            if want - self.held_mb >= 1.0:
                self._held.append(touched_block(int((want - self.held_mb) * _MB)))
                self.held_mb = want
        if self.noise and self.elapsed_s() is not None:
            if self.churn_mb >= self._saw_peak_mb:
                self._free_churn()  # the collector runs: everything goes back at once
                self._saw_peak_mb = self._next_peak()
                return
            step_mb = self.curves.sawtooth_mb_per_s * self.speed * MEMORY_TICK_S
            self._churn.append(touched_block(int(step_mb * _MB)))
            self.churn_mb += step_mb

    def _next_peak(self) -> float:
        lo, hi = self.curves.sawtooth_peak_mb
        return self._saw_rng.uniform(lo, hi)

    def _free_churn(self) -> None:
        for block in self._churn:
            with contextlib.suppress(BufferError):
                block.close()
        self._churn.clear()
        self.churn_mb = 0.0

    def release(self) -> None:
        """Give back everything held (the process stops)."""
        self._free_churn()
        for block in self._held:
            with contextlib.suppress(BufferError):
                block.close()
        self._held.clear()
        self.held_mb = 0.0
