"""Workers that start together go a slice per loop turn (loadgen.release): the barrier's
release, a resume after a pause and a jump in the target never put thousands of sends in
one turn of the loop, and between slices the loop reads its sockets."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest

from loadgen import eventloop
from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.release import SLICE, SlicedStart
from loadgen.workers import LoadGenerator, LoadPlan

pytestmark = pytest.mark.timeout(60)


class _Turns:
    """Counts the event loop's turns: a callback that schedules itself for the next."""

    def __init__(self) -> None:
        self.n = 0
        self._stopped = False
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        if not self._stopped:
            self.n += 1
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


async def test_waiters_go_a_slice_per_loop_turn_first_come_first_served() -> None:
    turns, gate = _Turns(), SlicedStart(per_turn=64)
    went: list[tuple[int, int]] = []  # (waiter, the loop turn it resumed in)

    async def waiter(i: int) -> None:
        await gate.enter()
        went.append((i, turns.n))

    await asyncio.gather(*(waiter(i) for i in range(200)))
    turns.stop()
    assert [i for i, _ in went] == list(range(200))  # in the order they came
    per_turn = Counter(t for _, t in went)
    assert sorted(per_turn.values()) == [8, 64, 64, 64]  # never more than a slice a turn
    assert gate.turns == 4 and gate.let_go == 200 and gate.waiting == 0


async def test_the_loop_reads_its_sockets_between_slices() -> None:
    """An answer already waiting on a socket is read while later workers still wait."""
    loop = asyncio.get_running_loop()
    gate = SlicedStart(per_turn=16)
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    read_when: list[int] = []  # how many workers had gone when the socket was read
    went = 0

    def on_readable() -> None:
        a.recv(64)
        read_when.append(went)
        loop.remove_reader(a.fileno())

    async def worker(i: int) -> None:
        nonlocal went
        await gate.enter()
        went += 1
        if i == 0:  # the first worker's "request" gets its answer at once
            b.send(b"answer")

    try:
        loop.add_reader(a.fileno(), on_readable)
        await asyncio.gather(*(worker(i) for i in range(160)))
    finally:
        a.close()
        b.close()
    assert read_when and read_when[0] < 160  # read before the last slice, not after all


async def test_a_cancelled_waiter_takes_no_place_in_its_slice() -> None:
    gate = SlicedStart(per_turn=2)
    tasks = [asyncio.create_task(gate.enter()) for _ in range(5)]
    await asyncio.sleep(0)  # every waiter queued
    tasks[0].cancel()
    tasks[1].cancel()
    await asyncio.sleep(0)  # one turn: the first slice
    await asyncio.sleep(0)
    assert [t.done() and not t.cancelled() for t in tasks[2:]] == [True, True, False]
    await asyncio.gather(*tasks[2:])
    assert gate.let_go == 3


async def test_a_steady_send_goes_at_once_until_its_turn_has_sent_a_slice() -> None:
    gate = SlicedStart(per_turn=3)
    assert [gate.admit_now() for _ in range(4)] == [True, True, True, False]
    await asyncio.sleep(0)  # the next loop turn: a new count
    assert gate.admit_now()
    waiter = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    assert gate.waiting == 1 and not gate.admit_now()  # no overtaking those who wait
    await waiter


def test_a_slice_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="per_turn must be >= 1, not 0"):
        SlicedStart(per_turn=0)


class _Instant:
    """A server that answers every request after one loop turn; it notes the turn each
    request was sent in."""

    max_connections = 4096

    def __init__(self, turns: _Turns) -> None:
        self.turns = turns
        self.sent: list[tuple[int, int]] = []  # (worker, turn)
        self.warmed: list[int] = []  # the turn of each warm-up
        self._expected, self._seen, self._all_sent = 0, set[int](), asyncio.Event()

    def expect(self, workers: int) -> asyncio.Event:
        """An event set once ``workers`` distinct workers have sent from now on."""
        self._expected, self._seen, self._all_sent = workers, set(), asyncio.Event()
        return self._all_sent

    async def warm_connection(self, url: str) -> None:
        self.warmed.append(self.turns.n)

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        self.sent.append((result.worker, self.turns.n))
        self._seen.add(result.worker)
        if self._expected and len(self._seen) >= self._expected:
            self._all_sent.set()
        await asyncio.sleep(0.01)
        result.status = 200
        return result


def _generator(client: _Instant, workers: int, window_s: float) -> LoadGenerator:
    plan = LoadPlan(
        endpoints=("http://x",),
        concurrency=workers,
        duration_s=window_s,
        max_requests=None,
        drain_timeout_s=5,
        barrier_timeout_s=5,
        request_id_prefix="t/load/chat",
    )
    pool = PromptPool((Prompt(0, "hi"),), source="test")
    return LoadGenerator(plan, client, pool, BodyBuilder(model="m"), lambda r: None)


def _first_turns(sent: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Each worker's first send among ``sent`` (worker, loop turn): the turn it went in."""
    firsts: dict[int, int] = {}
    for worker, turn in sent:
        firsts.setdefault(worker, turn)
    return firsts


async def _stop_once_all_sent(gen: LoadGenerator, all_sent: asyncio.Event) -> None:
    """End the issue window once every worker has sent (:meth:`_Instant.expect`): the
    window is a bound, not the test's clock, so a slow host cannot cut a release short."""
    await all_sent.wait()
    gen.stop_issuing("every worker sent")


def _most_in_one_turn(turns: Iterable[int]) -> int:
    """The most sends that shared one loop turn."""
    return max(Counter(turns).values())


async def test_the_barrier_releases_a_thousand_workers_a_slice_per_turn() -> None:
    turns = _Turns()
    client = _Instant(turns)
    gen = _generator(client, 1000, 30.0)
    ended: list[int | None] = []
    gen.on_release_end = lambda: ended.append(gen.state.release_ended_ns)
    assert await gen.start_workers()
    stopper = asyncio.create_task(_stop_once_all_sent(gen, client.expect(1000)))
    await asyncio.wait_for(gen.run(), 60)
    stopper.cancel()
    turns.stop()
    firsts = _first_turns(client.sent)
    assert len(firsts) == 1000 and _most_in_one_turn(firsts.values()) <= SLICE
    assert gen.state.release_turns == -(-1000 // SLICE)  # 16 turns of at most 64
    released, done = gen.state.barrier_released_ns, gen.state.release_ended_ns
    assert released is not None and done is not None and done >= released
    assert ended == [done]  # told once, at the last worker


async def test_workers_resumed_together_after_a_pause_go_in_slices() -> None:
    turns = _Turns()
    client = _Instant(turns)
    gen = _generator(client, 500, 30.0)
    assert await gen.start_workers()
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0.2)
    gen.pause()
    await asyncio.sleep(0.1)  # every in-flight request ended: all 500 wait
    resumed_at = len(client.sent)
    gen.resume()
    stopper = asyncio.create_task(_stop_once_all_sent(gen, client.expect(500)))
    await asyncio.wait_for(run, 60)
    stopper.cancel()
    turns.stop()
    firsts = _first_turns(client.sent[resumed_at:])  # each worker's first after the resume
    assert len(firsts) == 500 and _most_in_one_turn(firsts.values()) <= SLICE


async def test_a_jump_in_the_target_wakes_parked_workers_in_slices() -> None:
    turns = _Turns()
    client = _Instant(turns)
    gen = _generator(client, 400, 0.6)
    assert await gen.start_workers()
    gen.set_concurrency(1)  # the load starts at one worker; 399 park
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0.2)
    jumped_at = len(client.sent)
    gen.set_concurrency(400)
    await run
    turns.stop()
    firsts = _first_turns((w, t) for w, t in client.sent[jumped_at:] if w != 0)
    assert len(firsts) == 399 and _most_in_one_turn(firsts.values()) <= SLICE


async def test_a_live_raise_starts_its_new_workers_in_slices() -> None:
    turns = _Turns()
    client = _Instant(turns)
    gen = _generator(client, 10, 0.6)
    assert await gen.start_workers()
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0.2)
    warmed_before = len(client.warmed)
    gen.set_concurrency(400)  # 390 new workers, each proving its connection in the load
    await run
    turns.stop()
    new_warm_ups = client.warmed[warmed_before:]
    assert len(new_warm_ups) == 390 and _most_in_one_turn(new_warm_ups) <= SLICE
    firsts = _first_turns((w, t) for w, t in client.sent if w >= 10)
    assert len(firsts) == 390 and _most_in_one_turn(firsts.values()) <= SLICE


@pytest.mark.parametrize(
    "case",
    [
        test_waiters_go_a_slice_per_loop_turn_first_come_first_served,
        test_the_loop_reads_its_sockets_between_slices,
        test_the_barrier_releases_a_thousand_workers_a_slice_per_turn,
    ],
)
def test_the_same_on_the_loop_the_runner_uses(case: Any) -> None:
    """The runner's loop is uvloop where it exists (loadgen.eventloop): its turns must
    hold a slice each and poll the sockets between them as asyncio's do."""
    eventloop.run(case())


class _EndTogether:
    """Every worker's first request ends in the same loop turn (a server that paces all
    its streams on one clock); the later ones wait until the test lets them end."""

    max_connections = 4096

    def __init__(self, turns: _Turns) -> None:
        self.turns = turns
        self.first_end = asyncio.Event()
        self.later_end = asyncio.Event()
        self.sent: list[tuple[int, int]] = []

    async def warm_connection(self, url: str) -> None:
        return None

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        first = all(w != result.worker for w, _ in self.sent)
        self.sent.append((result.worker, self.turns.n))
        await (self.first_end if first else self.later_end).wait()
        result.status = 200
        return result


async def test_requests_that_end_together_restart_a_slice_per_turn() -> None:
    turns = _Turns()
    client = _EndTogether(turns)
    gen = _generator(client, 300, 0.5)  # type: ignore[arg-type]
    assert await gen.start_workers()
    run = asyncio.create_task(gen.run())
    await asyncio.sleep(0.1)
    assert len(client.sent) == 300
    client.first_end.set()  # all 300 first requests end in one turn...
    await asyncio.sleep(0.1)
    again = client.sent[300:]
    assert len({w for w, _ in again}) == 300  # ...each worker sent its next one...
    assert _most_in_one_turn(t for _, t in again) <= SLICE  # ...a slice per turn
    client.later_end.set()
    await run
    turns.stop()
