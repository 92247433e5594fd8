"""Synthetic window series for the endurance judge's tests: a healthy soak with realistic
noise (lognormal jitter, a GC-like memory sawtooth, ties in flat gauges), and the
degradations it must catch, injected from an onset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from soak.record.endurance import WindowFigures

Effect = Callable[[np.ndarray], dict[str, np.ndarray]]
"""Given the windows' hours since the onset (negative before it), factors (``*name``)
or additions (``+name``) per window field."""


@dataclass
class Series:
    """A run's windows and how they were made."""

    windows: list[WindowFigures]
    window_s: int
    seed: int
    jitter: float
    onset_s: float | None = None
    notes: dict[str, float] = field(default_factory=dict)


def healthy_figures(n: int, rng: np.random.Generator, jitter: float) -> dict[str, np.ndarray]:
    """Per-window figures of a healthy engine at a steady load."""

    def noisy(base: float, scale: float = 1.0) -> np.ndarray:
        return base * np.exp(rng.normal(0.0, jitter * scale, n))

    load = 1.0 + rng.normal(0.0, 0.02, n)
    period = int(rng.integers(2, 7))
    amplitude = float(rng.uniform(40.0, 200.0))
    phase = int(rng.integers(0, period))
    saw = amplitude * (((np.arange(n) + phase) % period) / max(period - 1, 1))
    errors = np.where(rng.random(n) < 0.05, rng.uniform(0.0005, 0.003, n), 0.0)
    flagged = np.where(rng.random(n) < 0.05, rng.uniform(0.0005, 0.003, n), 0.0)
    return {
        "output_tok_s": noisy(4200.0) * load,
        "req_s": noisy(21.0) * load,
        "ttft_p50": noisy(0.20),
        "ttft_p99": noisy(0.40, 1.5),
        "e2e_p50": noisy(5.0),
        "e2e_p99": noisy(9.0, 1.2),
        "itl_p50": noisy(0.020),
        "itl_p99": noisy(0.050, 1.5),
        "tpot_p50": noisy(0.021),
        "tpot_p99": noisy(0.030),
        "error_rate": errors,
        "output_len": noisy(200.0, 0.5),
        "sanity_rate": flagged,
        "engine_running": np.round(32.0 * load, 1),
        "engine_waiting": rng.poisson(2.0, n).astype(float),
        "engine_kv_usage": np.clip(0.40 * load + rng.normal(0.0, 0.02, n), 0.0, 1.0),
        "engine_preemptions": rng.poisson(0.3, n).astype(float),
        "server_rss_mb": 4000.0 + saw + rng.normal(0.0, 5.0, n),
        "server_cpu_percent": np.clip(95.0 + rng.normal(0.0, 3.0, n), 0.0, 100.0),
        "gpu_memory_used_mib": np.full(n, 71000.0),
        "gpu_util_percent": np.clip(90.0 + rng.normal(0.0, 4.0, n), 0.0, 100.0),
        "client_rss_mb": 300.0 + saw / 10.0 + rng.normal(0.0, 1.0, n),
        "client_open_files": 140.0 + rng.integers(-2, 3, n),
        "loop_lag_p99_s": noisy(0.005, 2.0),
    }


def make_series(
    n: int,
    *,
    seed: int = 0,
    window_s: int = 60,
    jitter: float | None = None,
    start_s: float = 10.0,
    effect: Effect | None = None,
    onset_s: float | None = None,
    ramp: bool = True,
) -> Series:
    """``n`` whole load windows from ``start_s`` (seconds since the run's origin), then a
    partial and a drain window; ``effect`` applies from ``onset_s`` (run seconds)."""
    rng = np.random.default_rng(seed)
    jitter = float(rng.uniform(0.05, 0.20)) if jitter is None else jitter
    figures = healthy_figures(n, rng, jitter)
    starts = start_s + window_s * np.arange(n)
    if effect is not None:
        onset = start_s if onset_s is None else onset_s
        hours = (starts + window_s / 2.0 - onset) / 3600.0
        for key, change in effect(hours).items():
            name = key[1:]
            figures[name] = figures[name] * change if key[0] == "*" else figures[name] + change
    if ramp:
        figures["output_tok_s"][0] *= 0.6
        figures["ttft_p99"][0] *= 3.0
    windows = [
        WindowFigures.model_validate(
            {
                "i": k,
                "start_s": float(starts[k]),
                "end_s": float(starts[k] + window_s),
                "completed": 1000,
            }
            | {name: float(values[k]) for name, values in figures.items()}
        )
        for k in range(n)
    ]
    end = start_s + window_s * n
    windows.append(WindowFigures(i=n, start_s=end, end_s=end + window_s, kind="partial"))
    windows.append(
        WindowFigures(i=n + 1, start_s=end + window_s, end_s=end + 2 * window_s, kind="drain")
    )
    return Series(windows=windows, window_s=window_s, seed=seed, jitter=jitter, onset_s=onset_s)


def after(hours: np.ndarray) -> np.ndarray:
    """Hours since the onset, 0 before it."""
    out: np.ndarray = np.maximum(hours, 0.0)
    return out


def throughput_creep(per_2h: float = -0.30) -> Effect:
    """Output tok/s (and req/s) falling linearly by ``per_2h`` every two hours."""
    return lambda h: {
        "*output_tok_s": 1.0 + per_2h * after(h) / 2.0,
        "*req_s": 1.0 + per_2h * after(h) / 2.0,
    }


def ttft_creep(start: float = 0.4, end: float = 4.0, hours: float = 2.0) -> Effect:
    """TTFT p99 from ``start`` to ``end`` seconds over ``hours``, linearly."""
    return lambda h: {"*ttft_p99": 1.0 + (end / start - 1.0) * after(h) / hours}


def rss_leak(mb_per_h: float = 300.0) -> Effect:
    """Server RSS growing by ``mb_per_h`` on top of its GC sawtooth."""
    return lambda h: {"+server_rss_mb": mb_per_h * after(h)}


def kv_leak(per_h: float = 0.3) -> Effect:
    """KV usage growing by ``per_h`` (a fraction of the cache) per hour at equal load."""
    return lambda h: {"+engine_kv_usage": per_h * after(h)}


def throughput_step(drop: float = 0.25) -> Effect:
    """Output tok/s falling by ``drop`` at the onset and staying there."""
    return lambda h: {"*output_tok_s": np.where(h >= 0, 1.0 - drop, 1.0)}


# --- the demo's scenarios, as ``simengine.endurance`` draws them, over 5 s windows -------

DEMO_WINDOW_S = 5
DEMO_START_S = 3.0
"""The demo's series origin: the first whole second after the barrier released (≈ 2 s)."""
DEMO_WINDOWS = 17
"""90 s of 5 s windows: 17 whole load windows, the first the ramp (16 judged)."""


def seconds_after(hours: np.ndarray) -> np.ndarray:
    """Seconds since the onset, 0 before it."""
    return after(hours) * 3600.0


def demo_decay(per_s: float = 0.015) -> Effect:
    """throughput-decay: every engine step 1 + 1.5 %/s × t longer, so output tok/s falls
    as 1/(1 + kt) and ITL/TPOT grow linearly."""

    def effect(h: np.ndarray) -> dict[str, np.ndarray]:
        stretch = 1.0 + per_s * seconds_after(h)
        return {"*output_tok_s": 1.0 / stretch, "*itl_p50": stretch, "*tpot_p50": stretch}

    return effect


def demo_slow_leak() -> Effect:
    """slow-leak at the demo's levels: KV usage near 0.3 % with its blocks leaking
    0.4 %/s × t; a 63 MB server whose collector saws 30 MB every 15 s, holding 4 MB/s × t
    more; GPU memory at 21,800 MiB, growing with the held MB and the leaked KV blocks; and
    each prefill waiting 5 ms/s × t longer on a TTFT of about 50 ms."""

    def effect(h: np.ndarray) -> dict[str, np.ndarray]:
        t = seconds_after(h)
        sawtooth = 30.0 * ((h * 3600.0 / 15.0) % 1.0)
        return {
            "*engine_kv_usage": np.full_like(h, 0.008),
            "+engine_kv_usage": 0.004 * t,
            "*server_rss_mb": np.zeros_like(h),
            "+server_rss_mb": 63.0 + sawtooth + 4.0 * t,
            "*gpu_memory_used_mib": np.full_like(h, 21_800.0 / 71_000.0),
            "+gpu_memory_used_mib": 4.0 * t + 0.004 * t * 80_000.0,
            "*ttft_p99": 1.0 + 0.005 * t / 0.05,
            "*ttft_p50": 1.0 + 0.005 * t / 0.04,
        }

    return effect


def demo_garbage(share: float = 0.7) -> Effect:
    """garbage-after: from the onset most plain answers degenerate (flagged)."""
    return lambda h: {"+sanity_rate": np.where(h >= 0, share, 0.0)}
