"""How a run stops: signals, ``control.jsonl`` commands, a threshold past its grace, a
demo's lifeline gone, a run directory that cannot be written — all through one object."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from soak.record.journal import JsonlWriter, storage_words
from soak.run.control import ControlReader
from soak.run.gate_session import GateSession
from soak.run.load_steps import LoadSteps
from soak.run.state import RunState


class RunControls:
    """Every way a run is told to stop, pause or mark: signals, ``control.jsonl``, a
    threshold past its grace, a lifeline gone, a run directory that cannot be written.

    It writes the state's stop fields and tells whatever is running now (the generator,
    the gates, the canary) to stop; the protocol registers those as they start."""

    def __init__(self, state: RunState, run_dir: Path) -> None:
        self.state = state
        self.reader = ControlReader(run_dir / "control.jsonl")
        self.gates: GateSession | None = None
        self.canary_stop = asyncio.Event()
        """Set by any stop: no canary round starts after it."""
        self.cancel_on_abort: set[asyncio.Task[Any]] = set()
        """Tasks an abort cancels at once (a gate phase, the canary loop)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.steps: LoadSteps | None = None
        """The steady load's step driver while it issues (``set`` commands go to it)."""

    def ask_stop(self, why: str, hard: bool = False) -> None:
        """Graceful stop (drain, record) or, when ``hard``, cancel in-flight requests too."""
        st = self.state
        if st.stop_asked is None:
            st.stop_asked = f"{why} during {st.phase} at {st.now_s():.1f} s"
        st.events.emit("control", f"{'abort' if hard else 'stop'} asked: {why}", "warning")
        self.canary_stop.set()
        if not hard and self.gates is not None:
            self.gates.cut()  # a before/after gate phase ends promptly, its rest not run
        if hard:
            st.hard_stop = True
            for task in self.cancel_on_abort:
                task.cancel()
        if st.gen is not None:
            if hard:
                st.gen.abort()
            else:
                st.gen.stop_issuing(f"stopped: {why}")

    def on_signal(self, signum: int) -> None:
        """First signal: graceful stop. A second SIGINT (or any third): abort the drain."""
        self.state.signals += 1
        n = self.state.signals
        hard = n >= 3 or (n >= 2 and signum == signal.SIGINT)
        self.ask_stop(signal.Signals(signum).name, hard=hard)

    def apply(self) -> None:
        """The commands appended to ``control.jsonl`` since the last tick."""
        events = self.state.events
        for cmd in self.reader.poll():
            kind = cmd.get("cmd")
            if kind == "mark":
                events.emit("mark", str(cmd.get("note", "")) or "operator mark")
            elif kind in ("stop", "abort"):
                self.ask_stop(f"operator {kind}", hard=kind == "abort")
            elif kind in ("pause", "resume"):
                self._pause(kind == "pause", str(cmd.get("note", "")))
            elif kind == "set":
                self._set(cmd)
            else:
                events.emit("warning", f"unknown control command {kind!r} ignored", "warning")

    def _pause(self, pause: bool, note: str) -> None:
        """Pause or resume issuing; only inside the issue window. A pause is a phase of its
        own (``paused``) on the timeline and a note on the verdict."""
        st = self.state
        gen, why = st.gen, f" ({note})" if note else ""
        if gen is None or st.phase not in ("load", "paused"):
            st.events.emit(
                "control", f"{'pause' if pause else 'resume'} ignored: not issuing", "warning"
            )
            return
        if pause and not gen.paused:
            gen.pause()
            st.events.emit("control", f"operator paused issuing{why}", "warning")
            st.enter("paused", "issuing paused by the operator; in-flight requests finish")
        elif not pause and gen.paused:
            gen.resume()
            st.events.emit("control", f"operator resumed issuing{why}")
            st.enter("load", "issuing resumed")

    def _set(self, cmd: dict[str, Any]) -> None:
        """A live change of the load's target: ``{"cmd": "set", "rate": R}`` (open loop) or
        ``"concurrency": N`` (closed loop); one the load cannot take is an event saying
        why, never a crash (the file is anyone's: its values are checked, not trusted)."""
        events, note = self.state.events, str(cmd.get("note", ""))[:200]
        rate, concurrency = cmd.get("rate"), cmd.get("concurrency")
        if isinstance(concurrency, float) and concurrency.is_integer():
            concurrency = int(concurrency)
        if self.steps is None:
            why: str | None = "not issuing (no steady load is running)"
        else:
            why = self.steps.change(rate=rate, concurrency=concurrency, note=note)
        if why is not None:
            events.emit("control", f"set ignored: {why}", "warning")
            return
        what = f"rate {rate:g} req/s" if rate is not None else f"concurrency {concurrency}"
        events.emit("control", f"operator set {what}" + (f" ({note})" if note else ""))

    def journal_failed(self, writer: JsonlWriter, err: OSError) -> None:
        """A journal's ``on_error``: the run directory cannot be written."""
        self.storage_failed(writer.path.name, err)

    def storage_failed(self, what: str, err: OSError) -> None:
        """The run directory could not be written: stop issuing at once (nothing more can
        be journaled), cut in-flight requests and end with a record that says why.

        Called by a journal from any thread; the stop itself runs on the runner's loop."""
        st = self.state
        if st.storage_error is not None:
            return
        st.storage_error = f"{storage_words(err)} writing {what} {st.when(st.now_s())}"
        with contextlib.suppress(OSError):  # runner.log is on the same, full, disk
            print(f"soaktop runner: {st.storage_error}", file=sys.stderr, flush=True)
        loop = self.loop
        if loop is None or _on_loop(loop):
            self._stop_for_storage()
        else:
            loop.call_soon_threadsafe(self._stop_for_storage)

    def _stop_for_storage(self) -> None:
        if self.state.stop_asked is None:
            self.state.stopped_by_storage = True
        self.ask_stop("the run directory could not be written", hard=True)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop in this thread
        return False
