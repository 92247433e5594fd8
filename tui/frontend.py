"""What the CLI calls to show a run: follow a runner it started, attach, or view.

``soak`` never imports ``tui``: the console script (``tui.entry``) hands the class to
``soak.cli.main.main`` as its frontend factory; the CLI builds one from the display flags
(``TuiFrontend(theme=..., ascii=..., refresh_s=...)``) and calls ``follow``, ``attach``
or ``view``. Nothing
is printed while the app is on screen; the closing message (verdict, how to re-attach,
where the runner's log is) is printed once the terminal is back.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from soak.cli.headless import final_report
from soak.record.models import (
    EXIT_CODES,
    EXIT_DETACHED_OPERATOR,
    EXIT_DETACHED_SIGNAL,
    EXIT_STORAGE,
    EXIT_USAGE,
    Status,
    load_record,
)
from soak.run.spawn import RunnerHandle
from soak.safe_text import safe_text
from tui.app import SoakTopApp
from tui.outcome import Outcome
from tui.run_files import read_planned, read_record
from tui.runner_link import PidRunner
from tui.settings import UiSettings, resolve_settings

RUNNER_EXIT_WAIT_S = 30.0
"""After the record appeared, how long to wait for our runner child to exit."""
STOP_MARGIN_S = 60.0
"""After a hang-up stopped the demo's run: its drain timeout plus this long (the cut
gates, the summary, the record) is how long to wait for the record."""


class TuiFrontend:
    """The Textual monitor as the CLI's user interface."""

    def __init__(
        self,
        theme: str | None = None,
        ascii: bool | None = None,
        refresh_s: float | None = None,
        out: TextIO | None = None,
    ) -> None:
        """Explicit values (CLI flags) win over ``SOAKTOP_THEME``/``SOAKTOP_ASCII``/
        ``SOAKTOP_REFRESH``, the config directory and the locale; resolved on first use."""
        self.theme = theme
        self.ascii = ascii
        self.refresh_s = refresh_s
        self.out = out
        self._settings: UiSettings | None = None

    @property
    def settings(self) -> UiSettings:
        """The resolved display settings."""
        if self._settings is None:
            self._settings = resolve_settings(self.theme, self.ascii, self.refresh_s)
        return self._settings

    # --- the three entry points ------------------------------------------------------

    def follow(self, handle: RunnerHandle, interval_s: float, detach_allowed: bool) -> int:
        """Live monitor of a runner this process started.

        Returns the record's exit code when the run finished (after "stop", the panes
        stay up until record.json is written); 6 when the operator detached (``d``) and
        129 on a hang-up (SIGHUP), as headless mode, both printing how to re-attach;
        5 when the runner could not write its run directory and no record fitted; 4
        (aborted) when the runner died otherwise without a record. ``interval_s`` is
        headless mode's print interval; the monitor redraws on every snapshot.
        ``detach_allowed=False`` (the demo): the quit dialog offers stop / cancel only,
        and a hang-up is a graceful stop followed to its record (bounded by the run's
        drain timeout plus ``STOP_MARGIN_S``), so the record is written before the
        demo's engine goes.
        """
        del interval_s  # the panes follow every snapshot; see UiSettings.refresh_s
        app = SoakTopApp(
            handle.run_dir,
            mode="live",
            settings=self.settings,
            runner=handle,
            owns_runner=True,
            detach_allowed=detach_allowed,
            handle_signals=True,
        )
        outcome = app.run()
        if outcome is not None and outcome.kind == "finished":
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.proc.wait(timeout=RUNNER_EXIT_WAIT_S)
        if outcome is not None and outcome.kind == "hangup":
            outcome = self._follow_stop(handle)
        return self._finish(outcome, handle.run_dir, handle.pid)

    def _follow_stop(self, handle: RunnerHandle) -> Outcome:
        """After a hang-up stopped the run (the demo): wait for the runner, as headless
        mode does, then end as its exit says (``hangup`` again if it is still going)."""
        try:
            rc = handle.proc.wait(timeout=_stop_wait_s(handle.run_dir))
        except subprocess.TimeoutExpired:
            return Outcome("hangup")
        record = read_record(handle.run_dir)
        if record is not None:
            return Outcome("finished", exit_code=record.exit_code)
        return Outcome("runner_died", returncode=rc)

    def attach(self, run_dir: Path) -> int:
        """Live monitor of a runner started elsewhere (its pid in ``runner.pid``); a run
        that already finished is shown as ``view`` would."""
        run_dir = Path(run_dir)
        if not _looks_like_run(run_dir):
            return self._usage(f"{run_dir} is not a soaktop run directory")
        if read_record(run_dir) is not None:
            return self.view(run_dir)
        runner = PidRunner.from_run_dir(run_dir)
        app = SoakTopApp(
            run_dir,
            mode="live",
            settings=self.settings,
            runner=runner,
            owns_runner=False,
            detach_allowed=True,
            handle_signals=True,
        )
        return self._finish(app.run(), run_dir, runner.pid)

    def view(self, run_dir: Path) -> int:
        """Replay a finished run (also one without a record: what its journals hold)."""
        run_dir = Path(run_dir)
        if not _looks_like_run(run_dir):
            return self._usage(f"{run_dir} is not a soaktop run directory")
        app = SoakTopApp(run_dir, mode="view", settings=self.settings)
        outcome = app.run()
        return 0 if outcome is not None else 1

    # --- after the app ---------------------------------------------------------------

    def _print(self, text: str) -> None:
        if self.out is None and _web_page():
            return  # stdout is textual-serve's packet pipe, and the tab has closed
        # The terminal may be gone (SSH dropped): never fail on the closing message.
        with contextlib.suppress(OSError, ValueError):
            print(safe_text(text), file=self.out or sys.stdout, flush=True)

    def _warn(self, message: str) -> None:
        """``soaktop: MESSAGE`` on stderr (display-safe; a gone terminal is no error)."""
        with contextlib.suppress(OSError, ValueError):
            print(f"soaktop: {safe_text(message)}", file=sys.stderr, flush=True)

    def _usage(self, message: str) -> int:
        self._warn(message)
        return EXIT_USAGE

    def _finish(self, outcome: Outcome | None, run_dir: Path, pid: int | None) -> int:
        """Print the closing message for ``outcome`` and return the exit code."""
        if outcome is None:
            self._print(
                f"soaktop: the monitor closed unexpectedly; the run may still be going.\n"
                f"  re-attach: soaktop attach {run_dir}"
            )
            return 1
        if outcome.kind == "finished":
            return self._print_record(run_dir, outcome.exit_code)
        if outcome.kind == "detached":
            who = f" (runner pid {pid})" if pid is not None else ""
            self._print(
                f"soaktop: detached; the run goes on{who}.\n"
                f"  re-attach: soaktop attach {run_dir}\n"
                f"  its record will be {run_dir / 'record.json'}"
            )
            # A hang-up detaches like headless mode (129); the operator's `d` has its own
            # code (6): not PASSED, since nothing is known yet of the verdict.
            return EXIT_DETACHED_SIGNAL if outcome.by_signal else EXIT_DETACHED_OPERATOR
        if outcome.kind == "hangup":
            self._print(
                "soaktop: terminal hung up; the run was asked to stop (drain, record) and "
                f"has not written its record yet: {run_dir / 'record.json'}"
            )
            return EXIT_DETACHED_SIGNAL
        if outcome.kind == "runner_died" and outcome.returncode == EXIT_STORAGE:
            self._warn(
                f"the runner could not write its run directory {run_dir} "
                "(disk full, quota or I/O error: its runner.log may say which) and no record "
                "fitted.\n"
                f"  free some space, then: soaktop recover {run_dir}"
            )
            return EXIT_STORAGE
        if outcome.kind == "runner_died":
            rc = outcome.returncode
            how = "" if rc is None else f" ({f'signal {-rc}' if rc < 0 else f'exit code {rc}'})"
            self._print(
                f"soaktop: the runner died{how} without writing a record.\n"
                f"  its log: {run_dir / 'runner.log'}\n"
                f"  finalise from the journals with: soaktop recover {run_dir}"
            )
            return EXIT_CODES[Status.ABORTED]
        return 0

    def _print_record(self, run_dir: Path, exit_code: int | None) -> int:
        try:
            rec = load_record(run_dir)
        except (OSError, ValueError):
            # A record another soaktop version wrote may not validate here: say where it is.
            self._print(f"soaktop: run finished; record: {run_dir / 'record.json'}")
            return exit_code if exit_code is not None else 1
        self._print(final_report(rec, run_dir))
        for reason in rec.reasons:  # the cause on stderr too, where scripts look for it
            if reason.code == "storage_error":
                self._warn(reason.message)
        return rec.exit_code


def _web_page() -> bool:
    """True when this monitor is a browser tab's (textual-serve set Textual's web driver):
    its stdout then carries the driver's length-prefixed packets, and text printed after
    the app's exit packet would be read as a packet."""
    return "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")


def _stop_wait_s(run_dir: Path) -> float:
    """How long a stopped run may take to write its record: its drain timeout (from
    ``config.json``; the default when unreadable) plus ``STOP_MARGIN_S``."""
    planned = read_planned(run_dir)
    value = planned.drain_timeout_s if planned is not None else None
    drain = value if value is not None and math.isfinite(value) and value > 0 else 120.0
    return drain + STOP_MARGIN_S


def _looks_like_run(run_dir: Path) -> bool:
    return run_dir.is_dir() and any(
        (run_dir / name).exists()
        for name in ("snapshots.jsonl", "record.json", "config.json", "runner.pid")
    )
