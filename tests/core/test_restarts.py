"""Engine restarts: seen once, at the right time, and never invented by two scrapes that
overlapped; the restart reason says each time once."""

from __future__ import annotations

import asyncio

from probes.engine_metrics import EngineSample
from soak.judge.faults import restart_reasons
from soak.record.faults import when
from soak.record.journal import JsonlWriter
from soak.watch import engine as engine_watch
from soak.watch.engine import EngineWatch


def _sample(t: float, gen: float) -> EngineSample:
    values: dict[str, float | None] = {
        "requests_finished_total": gen / 10,
        "prompt_tokens_total": gen,
        "generation_tokens_total": gen,
    }
    return EngineSample(t=t, engine="vllm", values=values)


async def test_two_overlapping_scrapes_are_not_a_restart(tmp_path, monkeypatch):
    """The periodic round and the runner's snapshot in flight together: the one sent first
    answers last with older counts. Only samples taken in sequence are compared."""
    answers = {
        "slow": (0.05, _sample(1.0, 100)),  # sent first, answered last, older counts
        "fast": (0.0, _sample(1.1, 150)),
    }
    order = iter(["slow", "fast"])

    async def fake_scrape(client, base, origin_ns):
        delay, s = answers[next(order)]
        await asyncio.sleep(delay)
        return s

    monkeypatch.setattr(engine_watch, "scrape", fake_scrape)
    watch = EngineWatch(["http://x"], {}, 0, JsonlWriter(tmp_path / "t.jsonl"))
    watch._take(0, _sample(0.0, 50))
    await asyncio.gather(watch.scrape_all(), watch.scrape_all())
    assert watch.restarts == [[]]
    # a real restart afterwards is still seen, against the newest sample in sequence
    watch._take(0, _sample(2.0, 10))
    assert [r["t"] for r in watch.restarts[0]] == [2.0]
    await watch.stop()


def test_a_restart_reason_says_each_time_once():
    telemetry = {
        "engines": [
            {"endpoint": 1, "restarts": [{"t": 10.2}, {"t": 10.4}, {"t": 40.0}]},
            {"endpoint": 0, "restarts": []},
        ]
    }
    (reason,) = restart_reasons(telemetry, load_start_s=5.0)
    assert reason.message == (
        "endpoint 1 restarted 3 times during the run (its counters went down at "
        "load+00:00:05, at load+00:00:35)"
    )


def test_when_never_says_minus_zero():
    assert when(4.8, 5.0) == "at load+00:00:00"  # at the release, not "before" it
    assert when(3.4, 5.0) == "at load-00:00:02"  # before the release: an honest minus
    assert when(5.2, 5.0) == "at load+00:00:00"
