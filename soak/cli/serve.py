"""``soaktop serve RUN_DIR`` and ``soaktop run|demo … --serve PORT``: the monitor in a browser.

The web server is its own process, ``python -m tui.serve`` (textual-serve; ``soak`` never
imports textual). Each browser tab runs ``soaktop attach RUN_DIR`` under Textual's web
driver: a monitor attached to the runner like a second terminal, reading the run
directory, so serving changes nothing in the measurement. The page has the monitor's keys,
stop and abort included, so binding beyond loopback takes ``--allow-remote`` and prints a
warning. No secret is on the server's command line, and the variables a run reads its
secrets from (``--api-key-env``, ``--header NAME: env:VAR``), with any other variable
holding one of their values, are removed from its environment (the monitor never needs
them; a process's environment is readable for its whole life).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from loadgen.headers import HeaderError, header_env_vars
from soak.record.models import EXIT_USAGE
from soak.safe_text import safe_line

if TYPE_CHECKING:
    from soak.cli.main import Frontend
    from soak.run.spawn import RunnerHandle

DEFAULT_PORT = 8765
"""``soaktop serve``'s port when none is given (8000 is vLLM's own default)."""
LISTEN_WAIT_S = 20.0
"""How long the web server may take to listen before the CLI gives up on it."""
STOP_WAIT_S = 10.0
"""How long the web server gets to close its pages after SIGTERM."""
REMOTE_WARNING = (
    "soaktop: WARNING: the monitor is served beyond loopback on {where}: anyone who can "
    "reach it sees the run and can stop or abort it from the page (no authentication)"
)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed: a whole number from 1 to 65535")
    return port


def _add_bind_flags(p: argparse.ArgumentParser, host_flag: str) -> None:
    p.add_argument(
        host_flag,
        dest="serve_host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the web monitor listens on (default 127.0.0.1); beyond loopback "
        "only with --allow-remote",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback address: the page can stop the run, and has no login",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` and add ``--serve`` to ``run`` and ``demo``. Called after
    ``scout`` copied run's flags: a scout's runs are not served."""
    from soak.cli.parser import _add_display

    p = sub.add_parser(
        "serve",
        help="serve a run's monitor to a browser (textual-serve)",
        description="Serve the live monitor of RUN_DIR (a finished run: its replay) on "
        "http://HOST:PORT/. Each browser tab is a monitor attached to the run, with its "
        "keys: the page can stop the run.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port, 1 to 65535 (default {DEFAULT_PORT})",
    )
    _add_bind_flags(p, "--host")
    _add_display(p)
    p.set_defaults(handler=cmd_serve)
    for name in ("run", "demo"):
        run = sub.choices[name]
        run.add_argument(
            "--serve",
            type=_port,
            metavar="PORT",
            default=None,
            help="also serve the live monitor to a browser on this port (soaktop serve)",
        )
        _add_bind_flags(run, "--serve-host")


def host_problem(host: str, allow_remote: bool, flag: str = "--host") -> str | None:
    """Why the web monitor may not listen on ``host`` (None: it may)."""
    if not host.strip():
        return f"{flag} '': allowed: an address or host name (default 127.0.0.1)"
    if allow_remote or host == "localhost":
        return None
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"{flag} {safe_line(host)}: not a loopback address; the page can stop the run, so "
        "serving beyond this machine needs --allow-remote (allowed without it: 127.0.0.1, "
        "::1, localhost)"
    )


def server_argv(
    run_dir: Path, host: str, port: int, ns: argparse.Namespace, parent_pid: int | None
) -> list[str]:
    """The web server's command line: the run directory, the address and display flags."""
    argv = [sys.executable, "-m", "tui.serve", str(run_dir), "--host", host, "--port", str(port)]
    if parent_pid is not None:
        argv += ["--parent-pid", str(parent_pid)]
    if (theme := getattr(ns, "theme", None)) is not None:
        argv += ["--theme", theme]
    if getattr(ns, "ascii", None):
        argv.append("--ascii")
    if (refresh := getattr(ns, "refresh_s", None)) is not None:
        argv += ["--refresh", repr(refresh)]
    return argv


def secret_vars(api_key_env: str | None, headers: list[str]) -> list[str]:
    """The variables a run reads secrets from: ``--api-key-env``'s and the ``env:``
    headers' (a header that does not parse names none: the run refuses it anyway)."""
    names = [api_key_env] if api_key_env and api_key_env != "<redacted>" else []
    for spec in headers:
        with contextlib.suppress(HeaderError):
            names += header_env_vars([spec]).values()
    return names


def run_secret_vars(run_dir: Path) -> list[str]:
    """:func:`secret_vars` of the run in ``run_dir``, from its ``config.json`` (which
    names the variables, never their values); none when it cannot be read."""
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        return secret_vars(cfg.get("api_key_env"), list(cfg.get("headers") or []))
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def server_env(secret_names: list[str]) -> dict[str, str]:
    """This environment without the named secrets, nor any variable holding one of their
    values (and without a driver a parent set)."""
    values = {v for k in secret_names if len(v := os.environ.get(k, "").strip()) >= 4}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in secret_names and not any(s in v for s in values)
    }
    env.pop("TEXTUAL_DRIVER", None)  # textual-serve sets it for each page's monitor
    return env


def _dial(host: str) -> str:
    """Where to connect to reach a server bound to ``host`` (a wildcard: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def wait_listening(proc: subprocess.Popen[bytes], host: str, port: int, timeout: float) -> bool:
    """True once something accepts on host:port; False if ``proc`` ended or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((_dial(host), port), 0.5):
            return True
        time.sleep(0.1)
    return False


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return " / ".join(safe_line(x) for x in lines[-3:]) or "no output"


class ServedMonitor:
    """``soaktop serve`` running in the background of a ``run``/``demo`` CLI."""

    def __init__(self, run_dir: Path, ns: argparse.Namespace, secrets: list[str]) -> None:
        self.host: str = ns.serve_host
        self.port: int = ns.serve
        # Its log outlives this call (read when it fails to start); stop() closes it.
        self._log = tempfile.TemporaryFile(prefix="soaktop-serve-")  # noqa: SIM115
        # Its own session: the terminal's Ctrl-C is the run's, not the web server's, which
        # ends with this CLI (--parent-pid) or when the run does.
        self.proc = subprocess.Popen(
            server_argv(run_dir, self.host, self.port, ns, os.getpid()),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=server_env(secrets),
            start_new_session=True,
        )

    def started(self) -> str | None:
        """None once the server listens, else why it did not start."""
        if wait_listening(self.proc, self.host, self.port, LISTEN_WAIT_S):
            return None
        self.stop()
        return f"the web monitor did not start on {self.host}:{self.port}: {_tail(self._log)}"

    def stop(self) -> None:
        """End the web server (its pages close; the run is not touched)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class ServingFrontend:
    """The CLI's frontend for ``--serve``: the web server beside the terminal monitor
    (``inner``) or, without a terminal, beside the headless status lines."""

    def __init__(self, ns: argparse.Namespace, inner: Frontend | None, secrets: list[str]) -> None:
        self.ns = ns
        self.inner = inner
        self.secrets = secrets

    def follow(self, handle: RunnerHandle, interval_s: float, detach_allowed: bool) -> int:
        """Serve ``handle``'s run while following it as the CLI would without ``--serve``;
        the server stops when the run ends or this CLI leaves (the runner is untouched)."""
        from soak.cli.headless import follow

        served = ServedMonitor(handle.run_dir, self.ns, self.secrets)
        if (why := served.started()) is not None:
            print(f"soaktop: {why}; the run goes on without it", file=sys.stderr, flush=True)
        else:
            _announce(served.host, served.port, handle.run_dir)
        try:
            if self.inner is not None:
                return self.inner.follow(handle, interval_s, detach_allowed)
            return follow(handle, interval_s, detach_on_hup=detach_allowed)
        finally:
            served.stop()

    def attach(self, run_dir: Path) -> int:
        """Not used: ``--serve`` is a flag of ``run`` and ``demo`` only."""
        raise NotImplementedError

    def view(self, run_dir: Path) -> int:
        """Not used: ``--serve`` is a flag of ``run`` and ``demo`` only."""
        raise NotImplementedError


def _announce(host: str, port: int, run_dir: Path) -> None:
    shown = f"[{host}]" if ":" in host else host
    print(
        f"soaktop: live monitor in a browser: http://{safe_line(shown)}:{port}/ "
        f"(after the run: soaktop serve {safe_line(run_dir)})",
        flush=True,
    )
    if host_problem(host, allow_remote=False) is not None:
        print(REMOTE_WARNING.format(where=f"{host}:{port}"), file=sys.stderr, flush=True)


def serve_problem(ns: argparse.Namespace) -> str | None:
    """Why ``run``/``demo``'s ``--serve`` flags are refused (None: no ``--serve``, or fine)."""
    if getattr(ns, "serve", None) is None:
        if getattr(ns, "allow_remote", False) or getattr(ns, "serve_host", None) != "127.0.0.1":
            return "--serve-host and --allow-remote need --serve PORT"
        return None
    return host_problem(ns.serve_host, ns.allow_remote, "--serve-host")


def serving(ns: argparse.Namespace, inner: Frontend | None, secrets: list[str]) -> Frontend | None:
    """``inner`` unchanged without ``--serve``, else the frontend that also serves it
    (``secrets``: :func:`secret_vars`, kept from the web server's environment)."""
    if getattr(ns, "serve", None) is None:
        return inner
    return ServingFrontend(ns, inner, secrets)


def cmd_serve(ns: argparse.Namespace) -> int:
    """``soaktop serve RUN_DIR``: serve its monitor until Ctrl-C (the run goes on)."""
    from soak.record.run_dir import RunDirError, record_problem

    if (why := host_problem(ns.serve_host, ns.allow_remote)) is not None:
        print(f"soaktop serve: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        problem = record_problem(ns.run_dir)
    except RunDirError as e:
        problem = str(e)
    if problem is not None:
        print(f"soaktop serve: {safe_line(problem)}", file=sys.stderr)
        return EXIT_USAGE
    if host_problem(ns.serve_host, allow_remote=False) is not None:
        print(REMOTE_WARNING.format(where=f"{ns.serve_host}:{ns.port}"), file=sys.stderr)
    argv = server_argv(ns.run_dir, ns.serve_host, ns.port, ns, parent_pid=os.getpid())
    # Its own session, so that each signal reaches it once, from here: a second one
    # while it closes its pages would cut that short. The pages' monitors are its children.
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        env=server_env(run_secret_vars(ns.run_dir)),
        start_new_session=True,
    )
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda _s, _f: proc.send_signal(signal.SIGTERM))
    return 0 if proc.wait() in (0, -signal.SIGTERM) else EXIT_USAGE
