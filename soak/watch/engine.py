"""Watches every endpoint's ``/metrics`` during the run: occupancy, KV, counters.

One task scrapes every endpoint at once and then sleeps the rest of the interval; each
scrape is cut after ``PERIODIC_TIMEOUT_SHARE`` of the interval, so a hung endpoint costs
one missed sample a round and never delays the others, the next round or the run. The
runner's own counter snapshots (barrier, end of drain, gate phases) have their own bound
(``snapshot_timeout_s``, 2 s; the periodic one for an endpoint already timing out): a
hung ``/metrics`` makes that reconciliation "unavailable", it does not stretch the run.
Each periodic sample counts toward the endpoint's coverage of the load
(``soak.judge.coverage``): answered only when it parsed into a known engine's metrics.

The pages are parsed off the event loop (the runner passes a ``soak.watch.parse_worker``
helper process): the loop only fetches bytes and takes the parsed sample back, so
scraping adds no parse time to the requests in flight. The parse is bounded on its own
(the helper's ``stall_s``, the interval's slack after the scrape bound); a helper that
hung or died costs those samples ("not answered", with the why) and a warning event, and
one given up for good is a soaktop failure of the run (``loop_errors``). Each sample goes to
``telemetry.jsonl``; the latest values go into snapshots; the peaks during the load go
into the record beside the client's own concurrency (two different numbers).

The load's window (barrier release → end of drain) is bounded by two samples per
endpoint: the last good one before ``tracking`` went on (the runner scrapes right at the
barrier release) and the last good one of the load, replaced by the settled counters once
the drain ended. Their deltas give the record the load's preemptions, prefix-cache and
spec-decode figures (:mod:`soak.watch.engine_figures`) and the server's own TTFT, E2E and
queue-time estimates — the same window as ``soak.judge.reconcile``.

The runner calls :meth:`EngineWatch.close_window` right after its end-of-drain
``settled_counters()``; from then on nothing moves the window (the after-gate phase's own
scrapes and settled counters are journaled but stay out of the load's figures).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import httpx

from loadgen.tls import verify
from probes.engine_metrics import EngineSample, fetch, scrape, server_latency
from soak.judge.coverage import Coverage, LoadWindow
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.watch.engine_figures import counter_delta, prefix_cache, spec_decode
from soak.watch.parse_worker import ParseWorker, bench_mode
from soak.watch.periodic import every, poll_timeout

_PEAKS = ("running", "waiting", "kv_usage")
_RESET_COUNTERS = (
    "requests_finished_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
)
"""Counters that only grow while the server lives: one going down is a restart."""
_SERVER_LATENCIES = {"server_ttft_s": "ttft", "server_e2e_s": "e2e", "server_queue_s": "queue"}
TIMED_OUT = "timed out"


def _timed_out(s: EngineSample | None) -> bool:
    return s is not None and (s.error or "").startswith(TIMED_OUT)


class EngineWatch:
    """Periodic and on-demand scrapes of all endpoints."""

    def __init__(
        self,
        endpoints: list[str],
        headers: dict[str, str],
        origin_ns: int,
        journal: JsonlWriter,
        interval_s: float = 1.0,
        scrub: Callable[[Any], Any] = lambda v: v,
        events: EventLog | None = None,
        window: LoadWindow | None = None,
        snapshot_timeout_s: float = 2.0,
        parser: ParseWorker | None = None,
    ) -> None:
        self.endpoints = endpoints
        self._scrub = scrub
        self._events = events
        self.interval_s = interval_s
        self.timeout_s = poll_timeout(interval_s)
        """Bound of one periodic scrape (shorter than the interval)."""
        self.snapshot_timeout_s = snapshot_timeout_s
        """Bound of one on-demand scrape (the runner's counter snapshots)."""
        self.cover = Coverage(
            interval_s, window or LoadWindow(), [f"endpoint {i}" for i in range(len(endpoints))]
        )
        self._failing = [False] * len(endpoints)
        self.loop_errors: list[str] = []
        """Unexpected exceptions of the periodic loop (soaktop bugs: the run is INVALID)."""
        self.parser = parser
        """Where pages are parsed: a helper process (owned: closed by :meth:`stop`), or
        None: on this loop (``probes.engine_metrics.scrape``; tests and the bench)."""
        if parser is not None:
            parser.stall_s = min(1.0, max(0.05, round(interval_s - self.timeout_s, 3)))
            parser.on_trouble = self._parser_trouble
        self._origin_ns = origin_ns
        self._journal = journal
        # A backstop only: every scrape is bounded by asyncio.wait_for (see _scrape).
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(max(snapshot_timeout_s, self.timeout_s)),
            verify=verify(),  # loadgen.tls: the run's CA and client certificate
        )
        self._task: asyncio.Task[None] | None = None
        self.latest: list[EngineSample | None] = [None] * len(endpoints)
        self.peaks: list[dict[str, float]] = [{} for _ in endpoints]
        self.engine_peaks: list[dict[str, dict[str, float]]] = [{} for _ in endpoints]
        """Per endpoint, per engine behind it (``engine``/``dp_rank`` label), the peaks."""
        self._running_sum = [0.0] * len(endpoints)
        self._running_n = [0] * len(endpoints)
        self.restarts: list[list[dict[str, Any]]] = [[] for _ in endpoints]
        """Per endpoint, every counter reset seen (a server restart), with its time."""
        self._previous: list[EngineSample | None] = [None] * len(endpoints)
        """The last good sample of each endpoint, to notice counters going down."""
        self._taken = [0] * len(endpoints)
        """Good samples taken in per endpoint: a scrape that saw this number move while it
        was in flight overlapped another one (see :meth:`_take`)."""
        self.scrapes = [0] * len(endpoints)
        self.errors = [0] * len(endpoints)
        self._tracking = False
        self._window_opened = False
        self._window_closed = False
        self.first: list[EngineSample | None] = [None] * len(endpoints)
        """Per endpoint, the good sample that opens the load's window."""
        self.last: list[EngineSample | None] = [None] * len(endpoints)
        """Per endpoint, the good sample that closes it (so far)."""

    @property
    def tracking(self) -> bool:
        """Peaks and the window's samples are kept only while True (the load and the
        drain). Turning it on opens the window at the latest good sample (the runner's
        scrape at the barrier release). Once the window is closed it stays off."""
        return self._tracking

    @tracking.setter
    def tracking(self, on: bool) -> None:
        if self._window_closed:
            return  # a closed window never reopens (nor do the load's peaks move)
        if on and not self._tracking and not self._window_opened:
            self._window_opened = True
            for i, s in enumerate(self.latest):
                if s is not None and s.error is None:
                    self.first[i] = self.last[i] = s
        self._tracking = on

    async def scrape_all(self, timeout_s: float | None = None) -> list[EngineSample]:
        """Scrape every endpoint now, all at once (the runner's counter snapshots); each
        scrape is cut after ``timeout_s`` (default ``snapshot_timeout_s``, or the periodic
        bound for an endpoint whose last scrape already timed out)."""
        bounds = [
            timeout_s
            if timeout_s is not None
            else self.timeout_s
            if _timed_out(self.latest[i])
            else self.snapshot_timeout_s
            for i in range(len(self.endpoints))
        ]
        parse_s: float | None = None
        if timeout_s is None and self.parser is not None:
            # A counter snapshot at a phase boundary (the reconciliation's edges) waits
            # for a helper that is still starting, and for its parse, within its own bound.
            parse_s = self.snapshot_timeout_s
            await self.parser.ready(parse_s)
        seen = list(self._taken)
        samples = await asyncio.gather(
            *(
                self._scrape(base, b, parse_s)
                for base, b in zip(self.endpoints, bounds, strict=True)
            )
        )
        for i, s in enumerate(samples):
            self._take(i, s, overlapped=self._taken[i] != seen[i])
        return list(samples)

    async def tick(self) -> list[EngineSample]:
        """One periodic round: every endpoint within the periodic bound; each sample
        counts toward the load's coverage (answered: it parsed into an engine's metrics)."""
        samples = await self.scrape_all(self.timeout_s)
        for i, s in enumerate(samples):
            why = s.error or (None if s.engine is not None else "no engine metrics recognised")
            self.cover.sample(f"endpoint {i}", s.t, why)
            self._note_trouble(i, why)
        return samples

    async def _scrape(
        self, base: str, timeout_s: float, parse_s: float | None = None
    ) -> EngineSample:
        """One endpoint: the GET within ``timeout_s``, then the parse in the helper
        (bounded by ``parse_s``, default its ``stall_s``), or both on this loop without a
        helper."""
        t = (time.perf_counter_ns() - self._origin_ns) / 1e9
        try:
            if self.parser is None:
                return await asyncio.wait_for(
                    scrape(self._client, base, self._origin_ns), timeout_s
                )
            got = await asyncio.wait_for(fetch(self._client, base, self._origin_ns), timeout_s)
        except TimeoutError:
            return EngineSample(
                t=t, engine=None, values={}, error=f"{TIMED_OUT} after {timeout_s:g} s"
            )
        if isinstance(got, EngineSample):
            return got
        return await self.parser.engine(got.body, got.t, parse_s)

    def _parser_trouble(self, why: str) -> None:
        """The helper was lost (a warning event), or given up (also a soaktop failure)."""
        if self.parser is not None and self.parser.given_up == why:
            msg = f"engine watch: {why}"[:300]
            if msg not in self.loop_errors:
                self.loop_errors.append(msg)
        if self._events is not None:
            self._events.emit(
                "warning",
                f"engine telemetry: {self._scrub(why)}",
                "warning",
                source="engine_metrics",
            )

    def _note_trouble(self, i: int, why: str | None) -> None:
        """A warning event when an endpoint's /metrics stops giving usable samples, and an
        info one when it gives them again (once per change, not per scrape)."""
        if (why is not None) == self._failing[i]:
            return
        self._failing[i] = why is not None
        if self._events is None:
            return
        if why is not None:
            self._events.emit(
                "warning",
                f"engine telemetry: endpoint {i} /metrics gives no usable sample: "
                f"{self._scrub(why)}",
                "warning",
                endpoint=i,
                source="engine_metrics",
            )
        else:
            self._events.emit(
                "warning",
                f"engine telemetry: endpoint {i} /metrics answers again",
                "info",
                endpoint=i,
                source="engine_metrics",
            )

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """``{"engine_metrics": {"endpoint i": entry}}`` over the load window so far."""
        return {"engine_metrics": self._scrub(self.cover.summary(now_s, min_expected))}

    def _take(self, i: int, s: EngineSample, overlapped: bool = False) -> None:
        self.scrapes[i] += 1
        self.latest[i] = s
        line = {"source": "engine", "endpoint": i} | asdict(s)
        self._journal.write(self._scrub(line))
        if s.error is not None:
            self.errors[i] += 1
            return
        # Two scrapes can be in flight at once (the periodic round and a runner snapshot):
        # one that overlapped another may hold the older counts, and comparing it would see
        # counters go down where the server never restarted. Only samples in sequence are.
        if not overlapped:
            self._check_restart(i, s)
            self._previous[i] = s
            self._taken[i] += 1
        if self._tracking:
            if self.first[i] is None:
                self.first[i] = s
            self.last[i] = s
            _raise_peaks(self.peaks[i], s.values)
            for label, values in s.engines.items():
                _raise_peaks(self.engine_peaks[i].setdefault(label, {}), values)
            running = s.values.get("running")
            if running is not None:
                self._running_sum[i] += running
                self._running_n[i] += 1

    def _check_restart(self, i: int, s: EngineSample) -> None:
        """A counter lower than in the previous sample: the server restarted (its counters
        began again at zero). Recorded, and an event on the timeline."""
        prev = self._previous[i]
        if prev is None:
            return
        went_down = {
            key: (b, a)
            for key in _RESET_COUNTERS
            if (b := prev.values.get(key)) is not None
            and (a := s.values.get(key)) is not None
            and a < b
        }
        if not went_down:
            return
        detail = ", ".join(f"{k} {b:,.0f} → {a:,.0f}" for k, (b, a) in went_down.items())
        self.restarts[i].append({"t": s.t, "counters": sorted(went_down)})
        if self._events is not None:
            self._events.emit(
                "restart",
                f"endpoint {i}: engine counters went down ({detail}): the server restarted",
                "critical",
                endpoint=i,
                t_s=s.t,
                counters=sorted(went_down),
            )

    async def _run(self) -> None:
        await every(self.interval_s, self.tick, "engine watch", self.loop_errors)

    def start(self) -> None:
        """Begin periodic scraping on the running loop (not at all in the bench's
        ``SOAKTOP_BENCH_METRICS=none`` arm: its counter snapshots remain). The parser's
        helper starts now, in the background, so it is ready long before the load."""
        if self.parser is not None:
            self.parser.prestart()
        if bench_mode() == "none":
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-watch")

    async def stop(self) -> None:
        """Stop scraping, close the HTTP client and the parser's helper process."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._client.aclose()
        if self.parser is not None:
            await self.parser.aclose()

    def close_window(self) -> None:
        """End the load's window for good (and stop tracking).

        The runner calls this right after the end-of-drain ``settled_counters()``, whose
        samples end the window; later scrapes and ``settled_counters()`` calls (the
        after-gate phase) are still journaled and shown live but no longer move the
        window's samples, peaks, preemptions or server latencies. Called before the window
        ever opened (no barrier release), it leaves no window at all.
        """
        self._tracking = False
        self._window_closed = True

    async def settled_counters(self, tries: int = 4, pause_s: float = 0.5) -> list[EngineSample]:
        """Scrape until the token counters stop moving (the engine publishes them a step
        late), at most ``tries`` times. Called with the window open and tracking off (the
        drain is over), the settled samples end the window; once :meth:`close_window` was
        called they leave it alone."""
        prev = await self.scrape_all()
        for _ in range(tries - 1):
            if any(s.error is not None for s in prev):
                break  # a failing endpoint is not asked again: the window is unavailable
            await asyncio.sleep(pause_s)
            cur = await self.scrape_all()
            if [s.values for s in cur] == [s.values for s in prev]:
                prev = cur
                break
            prev = cur
        if self._window_opened and not self._window_closed and not self._tracking:
            # the drain is over: the settled counters end the window
            for i, s in enumerate(prev):
                if s.error is None and self.first[i] is not None:
                    self.last[i] = s
        return prev

    def view(self) -> list[dict[str, object]]:
        """Latest values per endpoint, for the snapshot's telemetry section; from the
        barrier on, also the server's TTFT estimate over the load so far."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            if s is None:
                out.append({"endpoint": i, "status": "no data yet"})
            elif s.error is not None:
                out.append(
                    {"endpoint": i, "status": "scrape failed", "error": self._scrub(s.error)}
                )
            else:
                item = {"endpoint": i, "status": "ok", "t": s.t} | s.values
                first = self.first[i]
                end = self.last[i] if self._window_closed else s
                if first is not None and end is not None:
                    # the server's own TTFT since the barrier, beside the client's live one
                    item["server_ttft_s"] = server_latency(first, end, "ttft")
                out.append(item)
        return out

    def summary(self) -> list[dict[str, object]]:
        """Per endpoint: engine, peaks and mean occupancy during the load (per engine too
        when several share the endpoint), token slots, scrape counts, restarts, and over the
        load's window the preemptions, prefix-cache and spec-decode figures and the server's
        latency estimates (None: not exported, or no window)."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            peaks = self.peaks[i]
            first, last = self.first[i], self.last[i]
            good = last or self._previous[i]
            n = self._running_n[i]
            item: dict[str, object] = {
                "endpoint": i,
                "engine": s.engine if s is not None and s.error is None else None,
                "running_max": peaks.get("running"),
                "running_mean": self._running_sum[i] / n if n else None,
                "waiting_max": peaks.get("waiting"),
                "kv_usage_max": peaks.get("kv_usage"),
                "token_slots": good.values.get("token_slots") if good is not None else None,
                "cache_config": dict(good.cache_config) if good is not None else {},
                "scrapes": self.scrapes[i],
                "scrape_errors": self.errors[i],
                "restarts": list(self.restarts[i]),
                "window_s": [first.t, last.t] if first is not None and last is not None else None,
                "preemptions": counter_delta(first, last, "preemptions_total"),
                "prefix_cache": prefix_cache(first, last),
                "spec_decode": spec_decode(first, last),
            }
            if self.engine_peaks[i]:
                item["per_engine"] = [
                    {
                        "engine_label": label,
                        "running_max": p.get("running"),
                        "waiting_max": p.get("waiting"),
                        "kv_usage_max": p.get("kv_usage"),
                    }
                    for label, p in sorted(self.engine_peaks[i].items())
                ]
            for name, key in _SERVER_LATENCIES.items():
                item[name] = (
                    server_latency(first, last, key)
                    if first is not None and last is not None
                    else None
                )
            out.append(item)
        return out


def _raise_peaks(peaks: dict[str, float], values: dict[str, float | None]) -> None:
    for key in _PEAKS:
        v = values.get(key)
        if v is not None and v > peaks.get(key, float("-inf")):
            peaks[key] = v
