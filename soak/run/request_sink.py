"""Where every finished request goes: one line of ``requests.jsonl`` and the live figures.

:meth:`RequestSink.on_result` is the only code of the headless core on the request path:
it runs once per finished request on the measuring loop, so it journals the line as it is
(server text scrubbed only when there is any) and counts; failure events are capped per
class, the rest summed per snapshot tick.
"""

from __future__ import annotations

import time

from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats
from soak.record.journal import JsonlWriter, request_line
from soak.run.state import RunState

PLAIN_FINISH = frozenset({None, "stop", "length", "tool_calls", "abort", "eos", "error"})
"""finish_reason values with nothing to scrub (anything else is server text)."""

FAILURE_EVENTS_PER_CLASS = 20
"""Individual failure events per class; beyond it failures are aggregated per tick."""


class RequestSink:
    """Journals and counts finished requests for one run."""

    def __init__(self, state: RunState, requests: JsonlWriter, live: LiveLoadStats) -> None:
        self.state = state
        self.requests = requests
        self.live = live
        self._failures: dict[str, int] = {}
        """Failures per class so far: only for the per-class event limit."""
        self._unreported: dict[str, int] = {}

    def on_result(self, r: RequestResult, shard: int | None = None) -> None:
        """Journal one finished request and count it (``shard``: the shard that sent it,
        in a sharded run: :mod:`soak.run.shards`)."""
        st = self.state
        phase = st.request_phase
        if st.warmup is not None and phase == "load":
            phase = self._warmup_phase(r)
        line = request_line(r, st.origin_ns, phase, shard)
        if st.redactor.active and (r.failure_detail or r.finish_reason not in PLAIN_FINISH):
            line = st.redactor.json_line(line)  # server text: only then worth the pass
        self.requests.write_raw(line)
        self.live.record(r, st.now_s())
        if r.failure is not None and not r.cancelled:
            cls = str(r.failure)
            n = self._failures.get(cls, 0) + 1
            self._failures[cls] = n
            if n <= FAILURE_EVENTS_PER_CLASS:
                st.events.emit(
                    "failure",
                    f"{r.request_id}: {cls}"
                    + (f" — {r.failure_detail}" if r.failure_detail else ""),
                    "error",
                    failure_class=cls,
                    request_id=r.request_id,
                    status=r.status,
                )
            else:
                self._unreported[cls] = self._unreported.get(cls, 0) + 1

    def _warmup_phase(self, r: RequestResult) -> str:
        """``warmup`` or ``load`` (sent before or after the warm-up ended)."""
        st, wc = self.state, self.state.warmup
        assert wc is not None
        if wc.end_ns is None and wc.spec.seconds is not None:
            released = st.gen.state.barrier_released_ns if st.gen is not None else None
            if released is None:
                return "warmup"
            wc.released(released)
        return wc.phase(r.sent_ns, time.perf_counter_ns())

    def flush_unreported(self) -> None:
        """The failures beyond the per-class limit since the last tick, as one event."""
        if self._unreported:
            more = ", ".join(f"{n} {c}" for c, n in self._unreported.items())
            self.state.events.emit(
                "failures", f"{more} more failures", "error", counts=self._unreported
            )
            self._unreported = {}
