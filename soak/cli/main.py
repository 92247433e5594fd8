"""The ``soaktop`` command line: run, demo, scout, attach, view, serve, decide, compare,
runs, report, sim, verify, recover.

Exit codes (DESIGN.md §6, the README's table): 0 passed, 1 failed, 2 usage or
configuration error, 3 invalid, 4 aborted, 5 the run directory could not be written, 6 the
operator detached the monitor (the run goes on), 129 a hang-up detached it. ``verify``
exits 0 when the record agrees with its journals, else 1.

The headless core never imports the Textual monitor: the ``soaktop`` console script is
``tui.entry:main``, which hands a frontend factory to :func:`main` here. Without one
(``python -m soak``) everything runs headless. The parser is :mod:`soak.cli.parser`; the
handlers of ``decide`` and of ``compare``/``runs``/``report`` are in :mod:`soak.cli.decide`
and :mod:`soak.cli.reports`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from soak.cli.outputs import outputs_refused, write_outputs
from soak.cli.parser import build_parser, cli_flags, cli_values
from soak.record.models import EXIT_STORAGE, EXIT_USAGE
from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.spawn import RunnerHandle


class Frontend(Protocol):
    """The live monitor (``tui.frontend.TuiFrontend``) as the CLI sees it."""

    def follow(self, handle: RunnerHandle, interval_s: float, detach_allowed: bool) -> int:
        """Show a runner this process started until the run ends or the operator detaches."""
        ...

    def attach(self, run_dir: Path) -> int:
        """Show a runner started elsewhere (a finished run: replay it)."""
        ...

    def view(self, run_dir: Path) -> int:
        """Replay a finished run."""
        ...


class FrontendFactory(Protocol):
    """Builds the frontend from the display flags."""

    def __call__(
        self, theme: str | None = None, ascii: bool | None = None, refresh_s: float | None = None
    ) -> Frontend: ...


_UI: FrontendFactory | None = None
"""Set by :func:`main` when the console script provides the Textual monitor."""


def _terminal() -> bool:
    """A screen to draw the monitor on: a terminal, or a Textual driver named by
    ``TEXTUAL_DRIVER`` (textual-serve runs the app over pipes with its web driver there:
    the browser is the screen). Pipes without a driver (CI, nohup) stay headless."""
    if os.environ.get("TEXTUAL_DRIVER", "").strip():
        return True
    return sys.stdin.isatty() and sys.stdout.isatty()


def frontend_for(ns: argparse.Namespace, headless: bool = False) -> Frontend | None:
    """The monitor, when there is one and a terminal to show it on (CI, a pipe or nohup
    never start it)."""
    if headless or _UI is None or not _terminal():
        return None
    return _UI(
        theme=getattr(ns, "theme", None),
        ascii=getattr(ns, "ascii", None),
        refresh_s=getattr(ns, "refresh_s", None),
    )


def launch(
    cfg: RunConfig, detach_on_hup: bool = True, ui: Frontend | None = None
) -> tuple[int, Path | None]:
    """Start the runner and follow it, in the monitor when ``ui`` is given, else with
    status lines: (exit code, run directory if one was made)."""
    from soak.cli.headless import follow
    from soak.run.spawn import RunnerStartError, start_runner

    pending: list[int] = []  # signals that arrive while the runner is starting

    def hold(signum: int, _frame: object) -> None:
        pending.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, hold)
    try:
        handle = start_runner(cfg)
    except RunnerStartError as e:
        if e.returncode == EXIT_STORAGE:  # the runner said why (no space for a run there)
            return EXIT_STORAGE, None
        if e.returncode != EXIT_USAGE:
            print(f"soaktop: the runner failed to start ({e}); nothing was run", file=sys.stderr)
        return EXIT_USAGE, None
    for signum in pending:
        if not (signum == signal.SIGHUP and detach_on_hup):
            handle.signal(signum)
    if ui is not None:
        if not detach_on_hup:
            # The demo's engine dies with this process: a hang-up stops the run cleanly.
            signal.signal(signal.SIGHUP, lambda _s, _f: handle.signal(signal.SIGTERM))
        return ui.follow(handle, cfg.interval_s, detach_allowed=detach_on_hup), handle.run_dir
    return follow(handle, cfg.interval_s, detach_on_hup=detach_on_hup), handle.run_dir


def cmd_run(ns: argparse.Namespace) -> int:
    """``soaktop run``."""
    if _serve_refused(ns) or outputs_refused(ns):
        return EXIT_USAGE
    try:
        cfg = load_config(cli_values(ns), toml_path=ns.config, cli_flags=cli_flags())
    except ConfigError as e:
        print(f"soaktop: configuration error:\n{e}", file=sys.stderr)
        return EXIT_USAGE
    rc, run_dir = launch(cfg, ui=_with_serve(ns, frontend_for(ns, cfg.headless), cfg))
    return write_outputs(ns, run_dir, rc)  # --junit, --summary-md: from the record


def _with_serve(ns: argparse.Namespace, ui: Frontend | None, cfg: RunConfig) -> Frontend | None:
    """``ui``, or with ``--serve`` the frontend that also serves it to a browser."""
    from soak.cli.serve import secret_vars, serving

    return serving(ns, ui, secret_vars(cfg.api_key_env, cfg.headers))


def _serve_refused(ns: argparse.Namespace) -> bool:
    """Print why ``--serve``'s flags are refused; True when they are (nothing started)."""
    from soak.cli.serve import serve_problem

    if (why := serve_problem(ns)) is None:
        return False
    print(f"soaktop: {why}", file=sys.stderr)
    return True


def cmd_demo(ns: argparse.Namespace) -> int:
    """``soaktop demo``: the simulated engine, a soak against it, the record."""
    from soak.cli.demo import (
        SimStartError,
        cleanup,
        keep_server_logs,
        scenario_onset,
        simulated_engine,
    )
    from soak.record.journal import storage_words

    if _serve_refused(ns) or outputs_refused(ns):
        return EXIT_USAGE
    values = cli_values(ns)
    base = {
        "concurrency": 32,
        "duration_s": 60.0,
        "max_tokens": 128,
        "label": "demo",
        "endpoints": ["http://127.0.0.1:1"],
        "model": "placeholder",
        "dcgm": ["http://127.0.0.1:1/metrics"],  # the simulated engine always exports DCGM
        "nvml": False,  # its GPUs are simulated; this host's real ones would only confuse
    }
    if str(values.get("arrival") or "").startswith("trace:"):  # a replay lasts its trace
        del base["duration_s"]
    try:  # validate before starting anything: a bad value never leaves a process behind
        load_config(values, base=base, cli_flags=cli_flags())
    except ConfigError as e:
        print(f"soaktop: configuration error:\n{e}", file=sys.stderr)
        return EXIT_USAGE
    duration = float(values.get("duration_s") or 60.0)
    try:
        with simulated_engine(
            replicas=ns.replicas,
            gpus_per_replica=ns.gpus_per_replica,
            scenario=ns.scenario,
            scenario_at_s=scenario_onset(ns.scenario, duration, ns.scenario_at),
            noise=True,  # a demo engine jitters like a real one; the soak must not mind
            seed=ns.seed,
        ) as sim:
            replicas = sim.ready["replicas"]
            logs = [r["log"] for r in replicas if r.get("log")]
            dcgm = [r["dcgm_url"] for r in replicas if r.get("dcgm_url")]
            # The engine's own process is watched (RSS, CPU), beside any the user named.
            pids = [*(values.get("server_pid") or []), sim.pid]
            cfg = load_config(
                values | {"server_pid": list(dict.fromkeys(pids))},
                base=base
                | {"endpoints": sim.urls, "model": sim.model, "server_log": logs, "dcgm": dcgm},
            )
            print(
                f"soaktop: simulated engine up: {len(sim.urls)} replicas "
                f"({', '.join(sim.urls)}), scenario {ns.scenario}",
                flush=True,
            )
            # The engine dies with this process, so a hang-up stops the run (no detach).
            ui = _with_serve(ns, frontend_for(ns, cfg.headless), cfg)
            rc, run_dir = launch(cfg, detach_on_hup=False, ui=ui)
            try:
                if run_dir is not None:
                    keep_server_logs(sim, run_dir, cfg)
            except OSError as e:  # a full disk must not cost the demo its clean exit
                print(
                    f"soaktop: the simulated engine's logs were not copied into {run_dir}: "
                    f"{storage_words(e)}",
                    file=sys.stderr,
                )
            finally:
                cleanup(sim)
            return write_outputs(ns, run_dir, rc)  # --junit, --summary-md: from the record
    except SimStartError as e:
        print(f"soaktop: {e}", file=sys.stderr)
        return 1


def _readable_run(cmd: str, run_dir: Path) -> str | None:
    """Why ``soaktop CMD`` cannot show ``run_dir`` (None: it can): not a run directory,
    or a record.json that is damaged (a run without a record yet is shown)."""
    from soak.record.run_dir import RunDirError, record_problem

    try:
        why = record_problem(run_dir)
    except RunDirError as e:
        why = str(e)
    if why is not None:
        from soak.safe_text import safe_text  # a damaged record's values are quoted

        print(f"soaktop {cmd}: {safe_text(why)}", file=sys.stderr)
    return why


def cmd_attach(ns: argparse.Namespace) -> int:
    """``soaktop attach RUN_DIR``: the monitor of a run that goes on (status lines without
    a terminal); Ctrl-C or a hang-up only detaches."""
    from soak.cli.headless import final_report, follow
    from soak.record.run_dir import load_run_record
    from soak.run.spawn import AttachedRunner

    # Checked before the monitor opens: a damaged directory is a sentence, not a screen.
    if _readable_run("attach", ns.run_dir) is not None:
        return EXIT_USAGE
    if (ui := frontend_for(ns)) is not None:
        return ui.attach(ns.run_dir)
    handle = AttachedRunner(ns.run_dir)
    if not handle.alive():
        if (ns.run_dir / "record.json").exists():
            rec = load_run_record(ns.run_dir)
            print(final_report(rec, ns.run_dir))
            return rec.exit_code
        print(
            f"soaktop attach: the runner of {ns.run_dir} is not running and left no record; "
            f"finalise it with: soaktop recover {ns.run_dir}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return follow(handle, 10.0, interrupt_detaches=True)


def cmd_view(ns: argparse.Namespace) -> int:
    """``soaktop view RUN_DIR``: replay a finished run (its report without a terminal)."""
    from soak.cli.headless import final_report
    from soak.record.run_dir import load_run_record

    if _readable_run("view", ns.run_dir) is not None:
        return EXIT_USAGE
    if (ui := frontend_for(ns)) is not None:
        return ui.view(ns.run_dir)
    if not (ns.run_dir / "record.json").exists():
        print(
            f"soaktop view: {ns.run_dir} has no record yet (still running? soaktop attach; "
            f"a runner that died? soaktop recover)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(final_report(load_run_record(ns.run_dir), ns.run_dir))
    return 0


def _readers_allowed(cmd: str) -> bool:
    """Whether ``SOAKTOP_READERS`` is unset or allowed (else it is said, and ``cmd`` stops
    before it reads anything)."""
    from soak.record.split_read import env_readers

    try:
        env_readers()
    except ValueError as e:
        print(f"soaktop {cmd}: {e}", file=sys.stderr)
        return False
    return True


def cmd_verify(ns: argparse.Namespace) -> int:
    """``soaktop verify RUN_DIR``: 0 when the record agrees with its journals, 1 when it
    does not, 2 when the run directory cannot be read (named in the message)."""
    from soak.after.verify import verify_run
    from soak.record.run_dir import RunDirError

    if not _readers_allowed("verify"):
        return EXIT_USAGE
    try:
        problems = verify_run(ns.run_dir)
    except RunDirError as e:
        print(f"soaktop verify: cannot verify: {e}", file=sys.stderr)
        return EXIT_USAGE
    if problems:
        print(f"soaktop verify: {ns.run_dir}: the record does NOT agree with its journals:")
        from soak.safe_text import safe_line  # problems may quote the journals' text

        for p in problems:
            print(f"  - {safe_line(p)}")
        return 1
    from soak.record.run_dir import load_run_record

    rec = load_run_record(ns.run_dir)
    n = rec.load.completed + rec.load.failed + rec.load.cancelled if rec.load else 0
    what = "load summary"
    if rec.matrix is not None:
        what = f"matrix ({len(rec.matrix.cells)} cells)"
        n = sum(c.completed + c.failed for c in rec.matrix.cells)
    print(
        f"soaktop verify: {rec.run_id}: OK — {len(rec.files)} file hashes match; the {what} "
        f"recomputed from {n} journaled requests and the gates from "
        f"{_lines(ns.run_dir / 'probes.jsonl')} probe attempts"
        + (f" and the {len(rec.windows)} soak windows" if rec.windows else "")
        + f" equal the record ({rec.status.value})"
    )
    return 0


def _lines(path: Path) -> int:
    from soak.record.journal import read_jsonl

    return sum(1 for _ in read_jsonl(path))


def cmd_recover(ns: argparse.Namespace) -> int:
    """``soaktop recover RUN_DIR``."""
    from pydantic import ValidationError

    from soak.after.recover import RecoverError, recover_run
    from soak.record.run_dir import record_problems
    from soak.safe_text import safe_line

    if not _readers_allowed("recover"):
        return EXIT_USAGE
    try:
        rec = recover_run(ns.run_dir)
    except RecoverError as e:
        print(f"soaktop recover: {e}", file=sys.stderr)
        return int(getattr(e, "exit_code", EXIT_USAGE))
    except ValidationError as e:  # a journal line parsed, but into a value of the wrong kind
        print(
            f"soaktop recover: {ns.run_dir}: a journal holds values of the wrong shape "
            f"({record_problems(e)}); nothing was written",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        print(
            f"soaktop recover: {ns.run_dir}: the journals cannot be read back "
            f"({type(e).__name__}: {e}); a line holds values of the wrong type; "
            "nothing was written",
            file=sys.stderr,
        )
        return EXIT_USAGE
    done = rec.load.completed if rec.load else 0
    print(
        f"soaktop recover: wrote {ns.run_dir / 'record.json'}: {rec.status.value}, "
        f"{done} completed requests recovered from the journal"
    )
    for reason in rec.reasons:
        if reason.code == "journal_damaged":
            print(f"  note: {safe_line(reason.message)}")
    return 0


def main(argv: Sequence[str] | None = None, ui: FrontendFactory | None = None) -> int:
    """Entry point of ``python -m soak`` (headless) and, through ``tui.entry``, of the
    ``soaktop`` console script (``ui``: the Textual monitor's factory)."""
    global _UI
    _UI = ui
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["sim"]:  # everything after `sim` belongs to the simulated engine's parser
        from simengine.cli import main as sim_main

        return int(sim_main(args[1:]) or 0)
    ns = build_parser().parse_args(args)
    if (handler := getattr(ns, "handler", None)) is not None:
        return int(handler(ns))
    handlers = {
        "run": cmd_run,
        "demo": cmd_demo,
        "attach": cmd_attach,
        "view": cmd_view,
        "verify": cmd_verify,
        "recover": cmd_recover,
    }
    return handlers[ns.command](ns)


if __name__ == "__main__":
    sys.exit(main())
