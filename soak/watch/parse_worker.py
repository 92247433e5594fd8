"""The metrics parser process: ``/metrics`` pages are parsed here, never on the loop.

Prometheus text is parsed by ``prometheus_client``'s pure-Python parser: about 3 ms of CPU
for a 21 KB vLLM page. On the runner's event loop that is 3 ms of lag per endpoint per
scrape, added to the timing of every request in flight; a thread would not help (the
GIL holds the loop while the thread parses). So each watch hands its fetched pages, as
bytes, to one helper process (``python -m soak.watch.parse_worker``, started when the watch
starts: a fresh interpreter that imports only the parsers, never a ``fork`` of a process with a
running loop and threads) and gets a compact, picklable sample back. The loop only does
the pipe I/O and unpickles ~2 KB (microseconds); ``bench/loop_lag.py`` measures both.

The helper starts in the background: the watch calls ``prestart`` from its ``start``,
long before the load, so the first page finds it ready; a page that comes while a helper
is still starting waits for it within its own bound, never for the start itself.

Bounded, never a hang: a page not answered within ``stall_s`` (the interval's slack
after the scrape bound) is a sample error — not answered, with the why, for the coverage —
and the helper goes on (a starved CPU makes it slow, not broken). A helper that holds
work and answers nothing for ``stuck_s`` (10 s) is stuck: it is killed and every page
waiting on it becomes a sample error; a helper that died (its pipe closed) ends the same
way. A new one starts at once, in the background; one that cannot start (not ready within
``START_TIMEOUT_S``) costs its pages, and the next page tries again. After
``MAX_RESTARTS`` restarts the parser is given up: every later page is an error, and
``given_up`` says why (the watch records it as a soaktop failure). ``aclose`` stops a
start in progress (killing what it started), closes the helper's stdin (it exits at
end-of-file, as it does when the runner dies) and kills it if it does not go at once.

``SOAKTOP_BENCH_METRICS`` (bench only, see ``bench/loop_lag.py``): ``loop`` parses on
the loop as before; ``none`` also skips the engine watch's periodic scrapes (the counter
snapshots at the phase boundaries remain). Unset or ``worker``: this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, NoReturn

from probes.dcgm import parse_dcgm_page
from probes.engine_metrics import EngineSample, parse_page
from probes.gpu_reading import GpuReading
from probes.handoff import ParseUnavailable

BENCH_ENV = "SOAKTOP_BENCH_METRICS"
MAX_RESTARTS = 3
"""Helpers started after the first one died, hung or did not start, before the parser
is given up."""
STUCK_S = 10.0
"""A helper silent this long while holding work is stuck: it is killed and replaced."""
START_TIMEOUT_S = 10.0
"""A helper that has not said it is ready by then never will (an interpreter start and
two imports take ~0.15 s on an idle machine)."""
CLOSE_WAIT_S = 1.0
HELPER_ARGV = (sys.executable, "-m", "soak.watch.parse_worker")
"""The helper's command line (a test swaps in one that never says it is ready)."""

_REQ = struct.Struct("!cIdI")
"""Request: kind (``e`` engine, ``d`` DCGM), id, sample time, page length; the page."""
_RESP = struct.Struct("!II")
"""Answer: id, payload length; the payload (a pickled ``(status, value)``)."""
_READY = b"ready\n"

BenchMode = Literal["worker", "loop", "none"]


def bench_mode() -> BenchMode:
    """How engine ``/metrics`` is handled (``SOAKTOP_BENCH_METRICS``; bench only)."""
    mode = os.environ.get(BENCH_ENV, "worker").strip().lower() or "worker"
    if mode not in ("worker", "loop", "none"):
        raise ValueError(f"{BENCH_ENV}={mode!r} is not a mode; allowed: worker, loop, none")
    return mode  # type: ignore[return-value]


def off_loop_parser(name: str = "metrics parser") -> ParseWorker | None:
    """The parser a watch should use: a helper process, or None (parse on the loop) when
    the bench asks for the old path."""
    return None if bench_mode() == "loop" else ParseWorker(name)


@dataclass(eq=False)
class _Helper:
    """One helper process and the pages given to it."""

    proc: asyncio.subprocess.Process
    pending: dict[int, asyncio.Future[tuple[str, Any]]] = field(default_factory=dict)
    progress: float = 0.0
    """Loop time of the last answer (or of the moment work began after an idle spell)."""
    outstanding: int = 0
    """Pages sent and not yet answered (a page whose caller stopped waiting included)."""
    reader: asyncio.Task[None] | None = None
    ended: bool = False


class ParseWorker:
    """Parses ``/metrics`` pages in a helper process; every call bounded by ``stall_s``.

    A page not answered within ``stall_s`` is lost (a sample with ``error``), and the
    helper goes on: a starved CPU makes it slow, not broken. Only a helper that holds
    work and answers nothing for ``stuck_s`` is killed and replaced.
    """

    def __init__(
        self,
        name: str = "metrics parser",
        stall_s: float = 0.5,
        on_trouble: Callable[[str], None] | None = None,
        max_restarts: int = MAX_RESTARTS,
        stuck_s: float = STUCK_S,
    ) -> None:
        self.name = name
        self.stall_s = stall_s
        """Longest one page waits for its answer. A watch sets it to its interval's slack
        after the scrape bound, so a sample never takes longer than the interval."""
        self.stuck_s = stuck_s
        """Longest the helper may hold work without answering anything before it is
        killed as stuck (longer than ``stall_s``: a slow helper is not a dead one)."""
        self.on_trouble = on_trouble
        """Told each sentence when a helper is lost (the watch turns it into an event)."""
        self.max_restarts = max_restarts
        self.restarts = 0
        self.troubles: list[str] = []
        self.given_up: str | None = None
        """Why the parser was given up (None: it still works)."""
        self._helper: _Helper | None = None
        self._spawning: asyncio.Task[_Helper | ParseUnavailable] | None = None
        """The start in progress (one at a time), owned here, not by any page."""
        self._started = 0
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running helper's PID (None: none running now)."""
        h = self._helper
        return h.proc.pid if h is not None and not h.ended else None

    async def engine(self, body: bytes, t: float, bound_s: float | None = None) -> EngineSample:
        """``parse_page(body, t)`` in the helper; a parser failure is a sample with
        ``error`` (never a raise), as an unparsable page is. ``bound_s`` (default
        ``stall_s``): how long this page may wait — the runner's counter snapshots at the
        phase boundaries allow their own, longer, bound."""
        try:
            status, value = await self._call(b"e", t, body, bound_s)
        except ParseUnavailable as e:
            return EngineSample(t=t, engine=None, values={}, error=str(e))
        if status != "ok":
            raise RuntimeError(f"{self.name}: {value}")  # a soaktop bug in the helper
        sample: EngineSample = value
        return sample

    async def dcgm(self, body: bytes) -> list[GpuReading]:
        """``parse_dcgm_page(body)`` in the helper: ValueError for text the parser
        rejects, ``ParseUnavailable`` when the helper could not parse it."""
        status, value = await self._call(b"d", 0.0, body)
        if status == "error":
            raise ValueError(value)
        if status != "ok":
            raise RuntimeError(f"{self.name}: {value}")
        readings: list[GpuReading] = value
        return readings

    def prestart(self) -> None:
        """Begin starting the helper in the background, on the running loop (the watch's
        ``start``: long before the load, so the first page finds it ready); a no-op while
        one runs or starts, or once closed or given up."""
        if self._closed or self.given_up is not None or self._spawning is not None:
            return
        if self._helper is not None and not self._helper.ended:
            return
        with contextlib.suppress(ParseUnavailable):  # given up: said through on_trouble
            self._begin_start()

    async def ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Start the helper if none runs or starts, and wait up to ``timeout_s`` for it:
        True when one is running."""
        self.prestart()
        if (task := self._spawning) is not None:
            await asyncio.wait([task], timeout=timeout_s)  # never cancels the start
        return self.pid is not None

    async def _call(
        self, kind: bytes, t: float, body: bytes, bound_s: float | None = None
    ) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        bound = self.stall_s if bound_s is None else bound_s
        deadline = loop.time() + bound  # the whole page: a start included
        h = await self._running(deadline)
        if h.outstanding and loop.time() - h.progress > self.stuck_s:
            self._end(
                h,
                f"the {self.name} process answered nothing for {self.stuck_s:g} s while "
                f"holding {h.outstanding} page(s): it was killed",
            )
            h = await self._running(deadline)
        rid = next(self._ids) & 0xFFFFFFFF
        fut: asyncio.Future[tuple[str, Any]] = loop.create_future()
        if not h.outstanding:
            h.progress = loop.time()  # an idle helper's clock starts with this page
        h.pending[rid] = fut
        h.outstanding += 1
        assert h.proc.stdin is not None
        h.proc.stdin.write(_REQ.pack(kind, rid, t, len(body)) + body)
        try:
            await asyncio.wait([fut], timeout=max(0.0, deadline - loop.time()))
        finally:
            h.pending.pop(rid, None)
        if not fut.done():
            if h.ended:  # the helper ended while this page waited
                raise ParseUnavailable(f"the {self.name} process was lost")
            kb = len(body) / 1024
            raise ParseUnavailable(
                f"the {self.name} process gave no answer within {bound:g} s (a "
                f"{kb:,.0f} KB page): this sample is lost; the helper goes on"
            )
        return fut.result()

    async def _running(self, deadline: float) -> _Helper:
        """The live helper; one starting is waited for until ``deadline`` (loop time) at
        most, and none at all is started (in the background) first."""
        h = self._helper
        if h is not None and not h.ended:
            return h
        if self.given_up is not None:
            raise ParseUnavailable(self.given_up)
        if self._closed:
            raise ParseUnavailable(f"the {self.name} is closed")
        task = self._spawning if self._spawning is not None else self._begin_start()
        loop = asyncio.get_running_loop()
        # asyncio.wait leaves the start running when this page stops waiting (its bound,
        # or a cancelled scrape): the start belongs to the worker, not to one page.
        await asyncio.wait([task], timeout=max(0.0, deadline - loop.time()))
        if not task.done():
            raise ParseUnavailable(
                f"the {self.name} process is starting (not ready within {self.stall_s:g} s):"
                " this sample is lost"
            )
        if task.cancelled():
            raise ParseUnavailable(f"the {self.name} is closed")
        got = task.result()
        if isinstance(got, ParseUnavailable):
            raise ParseUnavailable(str(got))
        return got

    def _begin_start(self) -> asyncio.Task[_Helper | ParseUnavailable]:
        """Count a start (a restart after the first) and run it in the background; past
        ``max_restarts`` the parser is given up instead (a raise)."""
        if self._started > self.max_restarts:
            self._give_up(
                f"the {self.name} process was lost {self._started} time(s) (last: "
                f"{self.troubles[-1] if self.troubles else '?'}); no page is parsed "
                "for the rest of the run"
            )
        if self._started:
            self.restarts += 1
        self._started += 1
        task = asyncio.get_running_loop().create_task(self._start(), name=f"{self.name} start")
        self._spawning = task
        return task

    async def _start(self) -> _Helper | ParseUnavailable:
        """One start: the running helper, or why it could not start (said through
        ``on_trouble``; never raised, so nobody has to collect it)."""
        try:
            h = await self._spawn()
        except ParseUnavailable as e:
            self._lost(str(e))
            return e
        finally:
            self._spawning = None
        self._helper = h
        h.reader = asyncio.get_running_loop().create_task(self._read(h), name=f"{self.name} reader")
        return h

    async def _spawn(self) -> _Helper:
        """A helper that said it is ready; ParseUnavailable when it did not. Cancelled (a
        stop), the half-started process is killed, never left behind."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *HELPER_ARGV,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                # stderr stays the runner's (runner.log): a helper's traceback lands there
            )
        except OSError as e:
            raise ParseUnavailable(f"the {self.name} process could not start ({e})") from None
        assert proc.stdout is not None
        ready = False
        try:
            with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError):
                hello = await asyncio.wait_for(
                    proc.stdout.readexactly(len(_READY)), START_TIMEOUT_S
                )
                ready = hello == _READY
            if ready:
                return _Helper(proc)
            code = await _exit_status(proc)
        finally:
            if not ready:  # it did not start, or this start was cancelled (a stop)
                _kill(proc)
        status = f"it exited with status {code}" if code is not None else "it was killed"
        raise ParseUnavailable(
            f"the {self.name} process did not say it was ready within "
            f"{START_TIMEOUT_S:g} s ({status})"
        )

    def _give_up(self, why: str) -> NoReturn:
        self.given_up = why
        self.troubles.append(why)
        if self.on_trouble is not None:
            self.on_trouble(why)
        raise ParseUnavailable(why)

    async def _read(self, h: _Helper) -> None:
        """Answers from the helper, to the page waiting for each; its end ends it."""
        assert h.proc.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                rid, n = _RESP.unpack(await h.proc.stdout.readexactly(_RESP.size))
                payload = await h.proc.stdout.readexactly(n)
                h.progress = loop.time()
                h.outstanding = max(0, h.outstanding - 1)
                fut = h.pending.get(rid)  # absent: its caller was cancelled (a stop)
                if fut is not None and not fut.done():
                    fut.set_result(pickle.loads(payload))  # our own child's data
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        if not h.ended:
            code = await _exit_status(h.proc)
            status = f" (exit status {code})" if code is not None else ""
            self._end(h, f"the {self.name} process died{status}")

    def _end(self, h: _Helper, why: str) -> None:
        """Lose helper ``h``: kill it, fail its waiting pages with ``why``, tell the watch,
        and start its successor in the background (while restarts are left)."""
        if h.ended:
            return
        h.ended = True
        _kill(h.proc)
        if h.reader is not None and h.reader is not asyncio.current_task():
            h.reader.cancel()
        self._lost(why, h.pending.values())
        if not self._closed and self._started <= self.max_restarts:
            self._begin_start()  # ready, most likely, before the next page

    def _lost(self, why: str, pending: Iterable[asyncio.Future[Any]] = ()) -> None:
        """Record a lost (or never started) helper, fail ``pending`` with the why and tell
        the watch."""
        left = self.max_restarts - self._started + 1
        tail = "; a new one starts for the next page" if left > 0 else ""
        for fut in pending:
            if not fut.done():
                fut.set_exception(ParseUnavailable(why + tail))
        self.troubles.append(why)
        if self.on_trouble is not None and not self._closed:
            self.on_trouble(why + tail)

    async def aclose(self) -> None:
        """Stop a start in progress (killing what it started) and the helper (end-of-file,
        then a kill after ``CLOSE_WAIT_S``); idempotent."""
        self._closed = True
        if (task := self._spawning) is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._spawning = None  # a start cancelled before it ran never cleared it
        h, self._helper = self._helper, None  # a start that finished before the cancel
        if h is None or h.ended:
            return
        h.ended = True
        for fut in h.pending.values():
            if not fut.done():
                fut.set_exception(ParseUnavailable(f"the {self.name} is closed"))
        if h.proc.stdin is not None:
            h.proc.stdin.close()
        try:
            await asyncio.wait_for(h.proc.wait(), CLOSE_WAIT_S)
        except TimeoutError:
            _kill(h.proc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(h.proc.wait(), CLOSE_WAIT_S)
        if h.reader is not None:
            h.reader.cancel()
            await asyncio.gather(h.reader, return_exceptions=True)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def _exit_status(proc: asyncio.subprocess.Process) -> int | None:
    """The status of a helper whose pipe closed, if it is known at once (it exits then)."""
    try:
        return await asyncio.wait_for(proc.wait(), 0.1)
    except TimeoutError:
        return None


# -- the helper process ------------------------------------------------------------------


def _handle(kind: bytes, t: float, body: bytes) -> tuple[str, Any]:
    """One page: ``("ok", value)``, ``("error", why)`` for text the DCGM parser rejects,
    ``("bug", why)`` for anything else (a soaktop bug: the watch records it)."""
    try:
        if kind == b"e":
            return "ok", parse_page(body, t)  # catches the page's own troubles
        if kind == b"d":
            try:
                return "ok", parse_dcgm_page(body)
            except ValueError as e:
                return "error", f"unparsable /metrics: {e}"[:300]
        return "bug", f"unknown request kind {kind!r}"
    except Exception as e:
        return "bug", f"{type(e).__name__}: {e}"[:300]


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main() -> None:
    """The helper: pages in on stdin, pickled samples out on stdout, until end-of-file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner decides when this ends
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to the runner's log, never into the answers
    stdin = sys.stdin.buffer
    out.write(_READY)
    out.flush()
    while (head := _read_exactly(stdin, _REQ.size)) is not None:
        kind, rid, t, n = _REQ.unpack(head)
        body = _read_exactly(stdin, n)
        if body is None:
            return
        payload = pickle.dumps(_handle(kind, t, body), protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_RESP.pack(rid, len(payload)) + payload)
        out.flush()


if __name__ == "__main__":
    main()
