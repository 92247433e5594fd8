"""One read of the journal for the record's load and all its slices gives the record the
same figures as one ``summarize_load`` per slice: the whole load, every step (its goodput,
a sweep's knee), every class of a mix and every turn of a conversation, over a journal of
varied lines (failures, cancels, sanity flags, usage disagreements, stale retries, a
warm-up, unstamped lines, an open loop's intended times)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.stats import PercentileMethod
from soak.judge.goodput import good_line, measured_steps, sweep_of
from soak.judge.load_pass import load_figures
from soak.record.class_figures import class_timing
from soak.record.models import LoadStep, LoadSummary, SweepResult
from soak.record.step_figures import StepCounts, StepTallies, step_lines, step_timing
from soak.record.summary import LoadSlice, LoadTiming, summarize_load, summarize_slices
from soak.record.turn_figures import conversation_fields

CLASSES = [("chat", 3.0), ("long", 1.0), ("json", 1.0)]
TURNS = 3
CONFIG: dict[str, Any] = {
    "mix": {"classes": [{"name": n, "weight": w} for n, w in CLASSES]},
    "turns": TURNS,
    "think_time_s": 0.5,
    "slo": "ttft<0.3s",
    "sweep": "rate=2,4,6,8",
    "percentile_method": "nearest-rank",
}


def _journal(path: Path, open_loop: bool, n: int = 1500) -> Path:
    """``n`` load lines over 0..100 s (and a warm-up before), varied on purpose."""
    rng = random.Random(7)
    out = []
    for i in range(20):  # a warm-up: in no figure
        out.append({"id": f"w{i}", "phase": "warmup", "ok": True, "sent_s": -5.0 + i * 0.1})
    for i in range(n):
        at = i * 100.0 / n
        sent = at + (rng.random() * 0.4 if open_loop else 0.0)
        ok = rng.random() > 0.12
        cancelled = not ok and rng.random() < 0.3
        ot = rng.choice([None, 0, 1, 2, 7, 30]) if ok else None
        chunks = ot if rng.random() > 0.1 else (ot or 0) + 1  # now and then: disagrees
        ttft = 0.05 + rng.random() * 0.5 if ok and ot else None
        e2e = (ttft or 0.05) + rng.random() if ok else None
        line: dict[str, Any] = {
            "id": f"load/{i}",
            "phase": "load",
            "worker": i % 8,
            "ok": ok and not cancelled,
            "sent_s": sent,
            "end_s": sent + e2e if e2e is not None else None,
            "ttfb_s": 0.01 if ok else None,
            "ttft_s": ttft,
            "first_content_s": ttft if rng.random() > 0.2 else None,
            "e2e_s": e2e,
            "failure": None if ok else rng.choice(["http_5xx", "timeout", "contract_error"]),
            "prompt_tokens": rng.choice([None, 20, 400]) if ok else None,
            "output_tokens": ot,
            "chunks": chunks or 0,
            "cancelled": cancelled,
            "stale_retry": rng.random() < 0.03,
            "itl_us": [rng.randint(1000, 40000) for _ in range(max(0, (ot or 0) - 1))],
            "workload_class": rng.choice(["chat", "chat", "long", "json", "other"]),
            "session": i // TURNS,
            "turn": i % TURNS + 1,
        }
        if ok and rng.random() < 0.05:
            line["sanity"] = ["repetition"]
        if rng.random() < 0.02:
            line["answer_truncated"] = True
        if open_loop:
            line["intended_s"] = at
        if i % 97:  # a few unstamped lines: step 0's, as a run without a plan writes them
            line["step"] = min(4, int(sent // 25))
        out.append(line)
    path.write_bytes(b"".join(orjson.dumps(ln) + b"\n" for ln in out))
    return path


def _timing(open_loop: bool) -> LoadTiming:
    return LoadTiming(
        requested_concurrency=8, workers_started=8, barrier_released=True,
        issue_start_s=0.0, issue_end_s=100.0, drain_end_s=103.0, issued=1500,
        sanity_checked=True, backoffs=2, offered_rate=15.0 if open_loop else None,
        held_by_cap=3 if open_loop else 0,
    )  # fmt: skip


def _steps() -> list[LoadStep]:
    steps = [
        LoadStep(index=i, origin="sweep", label=f"rate={2 * i + 2}", start_s=25.0 * i,
                 end_s=25.0 * (i + 1), settle_s=3.0, rate_start=2.0 * i + 2)
        for i in range(4)
    ]  # fmt: skip
    steps.append(LoadStep(index=4, origin="live", label="live: rate 9", start_s=100.0))
    return steps  # the last one has no end: no figures


def _counts(open_loop: bool) -> list[StepCounts]:
    if not open_loop:
        return [StepCounts(backoffs=1)] * 5
    return [StepCounts(offered_rate=2.0 * i + 2, held_by_cap=i, backoffs=1) for i in range(5)]


def _dump(x: Any) -> Any:
    if isinstance(x, list):
        return [_dump(v) for v in x]
    return x.model_dump(mode="json") if hasattr(x, "model_dump") else x


def _of(key: str, value: object) -> Callable[[dict[str, Any]], bool]:
    """The keep of a slice keyed by one field of the line, as the slices were kept."""
    return lambda line: line.get(key) == value


def _separately(
    path: Path, timing: LoadTiming, steps: list[LoadStep], counts: list[StepCounts]
) -> tuple[LoadSummary, list[LoadStep], SweepResult | None, list[LoadSummary], list[LoadSummary]]:
    """The record's slices as before one read: one ``summarize_load`` per slice."""
    method: PercentileMethod = "nearest-rank"
    load = summarize_load(path, timing, method)
    good = good_line(CONFIG)
    done = []
    for step, c in zip(steps, counts, strict=True):
        st = step_timing(step, timing, c, last=step is steps[-1])
        if st is None:
            done.append(step.model_copy(update={"load": None, "goodput": None}))
            continue
        n_good = [0]

        def visit(line: dict[str, Any], n: list[int] = n_good) -> None:
            n[0] += good(line)

        s = summarize_load(path, st, method, visit=visit, keep=step_lines(step.index, st))
        s = s.model_copy(update={"issued": s.completed + s.failed + s.cancelled})
        rate = n_good[0] / s.issue_s if s.issue_s else None
        done.append(step.model_copy(update={"load": s, "goodput": rate}))
    issued = Counter(ln.get("workload_class") for ln in _load_lines(path))
    classes = [
        summarize_load(
            path,
            class_timing(timing, issued[name]),
            method,
            keep=_of("workload_class", name),
        )
        for name, _ in CLASSES
    ]
    turn_issued = Counter(ln.get("turn") for ln in _load_lines(path))
    whole = LoadTiming.from_summary(load)
    turns = [
        summarize_load(
            path,
            dataclasses.replace(
                whole,
                issued=turn_issued[i],
                backoffs=0,
                worker_errors={},
                worker_start_failures={},
            ),
            method,
            keep=_of("turn", i),
        )
        for i in range(1, TURNS + 1)
    ]
    return load, done, sweep_of(done, CONFIG), classes, turns


def _load_lines(path: Path) -> list[dict[str, Any]]:
    lines = [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
    return [ln for ln in lines if ln.get("phase", "load") == "load"]


@pytest.mark.parametrize("open_loop", [False, True], ids=["closed", "open"])
def test_one_read_gives_every_slice_the_figures_of_its_own_pass(
    tmp_path: Path, open_loop: bool
) -> None:
    path = _journal(tmp_path / "requests.jsonl", open_loop)
    timing, steps, counts = _timing(open_loop), _steps(), _counts(open_loop)
    load, done, sweep, classes, turns = _separately(path, timing, steps, counts)
    seen: list[str] = []
    got = load_figures(
        path, timing, CONFIG, "nearest-rank", steps, counts, visit=lambda ln: seen.append(ln["id"])
    )
    assert _dump(got.load) == _dump(load)
    assert len(seen) == 1500  # the whole load's visitor saw every load line, no warm-up
    assert _dump(got.steps) == _dump(done)
    assert got.sweep is not None and _dump(got.sweep) == _dump(sweep)
    assert [c.name for c in got.classes] == [n for n, _ in CLASSES]
    assert _dump([c.load for c in got.classes]) == _dump(classes)
    assert _dump([t.load for t in got.conversation["turns"]]) == _dump(turns)
    # The sessions and the rest of the record's turn keys, as conversation_fields says.
    alone = conversation_fields(path, CONFIG, load, "nearest-rank")
    assert _dump(got.conversation["sessions"]) == _dump(alone["sessions"])
    assert _dump(got.conversation["turns"]) == _dump(alone["turns"])
    # Measured for real: the slices are not empty, and an open loop's steps are scheduled.
    assert all(c.load.completed > 0 and c.load.failed > 0 for c in got.classes)
    assert done[0].load is not None and done[0].load.completed > 0
    assert (done[0].load.lateness_s.n > 0) is open_loop
    assert StepTallies(steps, timing, counts, good_line(CONFIG)).bounds is not None  # bisect
    # The steps-alone path (measured_steps) agrees too.
    alone_steps, alone_sweep = measured_steps(path, steps, timing, CONFIG, counts)
    assert _dump(alone_steps) == _dump(done) and _dump(alone_sweep) == _dump(sweep)


def test_the_turns_can_take_another_load_s_timing(tmp_path: Path) -> None:
    """verify measures the turns over the record's load, whatever this read computes."""
    path = _journal(tmp_path / "requests.jsonl", open_loop=False)
    timing = _timing(False)
    record_load: LoadSummary = summarize_load(path, dataclasses.replace(timing, drain_end_s=150.0))
    got = load_figures(path, timing, CONFIG, "nearest-rank", turns_of=record_load)
    alone = conversation_fields(path, CONFIG, record_load, "nearest-rank")
    assert _dump(got.conversation["turns"]) == _dump(alone["turns"])
    assert got.conversation["turns"][0].load.drain_s == pytest.approx(50.0)


def test_summarize_slices_is_one_summarize_load_per_slice(tmp_path: Path) -> None:
    path = _journal(tmp_path / "requests.jsonl", open_loop=True)
    timing = _timing(True)
    slices = [
        LoadSlice(lambda ln: ln.get("workload_class") == "long", class_timing(timing, 0)),
        LoadSlice(lambda ln: ln["sent_s"] < 50.0, dataclasses.replace(timing, issue_end_s=50.0)),
    ]
    whole, parts = summarize_slices(path, timing, "nearest-rank", slices)
    assert _dump(whole) == _dump(summarize_load(path, timing))
    for s, part in zip(slices, parts, strict=True):
        assert _dump(part) == _dump(summarize_load(path, s.timing, keep=s.keep))
    assert parts[1].completed > 0 and parts[1].lateness_s.n > 0


def test_overlapping_step_spans_are_routed_as_each_step_s_keep_takes_them(
    tmp_path: Path,
) -> None:
    """Steps whose spans overlap (a hand-edited record) or are empty: each line still
    goes to every step whose own keep takes it, not only to one."""
    path = _journal(tmp_path / "requests.jsonl", open_loop=True)
    timing = _timing(True)
    steps = [
        LoadStep(index=0, origin="live", label="a", start_s=0.0, end_s=60.0),
        LoadStep(index=1, origin="live", label="b", start_s=40.0, end_s=100.0),
        LoadStep(index=2, origin="live", label="c", start_s=70.0, end_s=70.0),
    ]
    counts = [StepCounts(offered_rate=5.0)] * 3
    tallies = StepTallies(steps, timing, counts, lambda ln: True)
    assert tallies.bounds is None  # the scan, not the bisect
    done = measured_steps(path, steps, timing, {}, counts)[0]
    for step, c, got in zip(steps, counts, done, strict=True):
        st = step_timing(step, timing, c, last=step is steps[-1])
        assert st is not None and got.load is not None
        want = summarize_load(path, st, keep=step_lines(step.index, st))
        assert got.load.completed == want.completed and got.load.ttft_s == want.ttft_s
    assert done[0].load is not None and done[1].load is not None
    assert done[0].load.completed + done[1].load.completed > summarize_load(path, timing).completed
