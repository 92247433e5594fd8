"""The monitor in a browser: a textual-serve web server whose page runs ``soaktop attach``.

``python -m tui.serve RUN_DIR --host H --port P`` is what ``soaktop serve`` and
``soaktop run --serve`` start (``soak.cli.serve``); ``soak`` never imports this module
(it imports textual), it runs it as a process. Each browser tab gets its own monitor
process — ``soaktop attach RUN_DIR`` under Textual's web driver — attached to the runner
as a second terminal would be: it reads the run directory and never measures, so the
run's figures are the same whether anyone watches or not. A finished run is replayed.

The command textual-serve runs holds only the interpreter, the run directory and display
flags: nothing secret is ever on a command line (an API key stays in its variable, and
``soak.cli.serve`` removes that variable from this server's environment).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server

from soak.safe_text import safe_line

CLOSE_PAGES_S = 2.0
"""On SIGINT/SIGTERM, how long open pages get before they are closed."""
PARENT_POLL_S = 1.0
"""How often a server started by ``soaktop run --serve`` checks that its CLI still lives."""
PAGE_TEMPLATE = "app_index.html"
"""textual-serve's page, which soaktop serves with :func:`local_page`'s one change."""
_REMOTE_STYLESHEET = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*\"[^>]*>", re.S)
# The same face from textual-serve's own static folder: the page asks only this host.
_LOCAL_FONT = """<style>
      @font-face { font-family: "Roboto Mono"; font-style: normal; font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf"); }
      @font-face { font-family: "Roboto Mono"; font-style: italic; font-weight: 100 700;
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf"); }
    </style>"""


def local_page(templates: Path) -> str:
    """textual-serve's page template with its remote stylesheet (Google's web font) swapped
    for the same font from the serving host: an offline machine draws the page as well,
    and no third party learns who watches a soak."""
    return _REMOTE_STYLESHEET.sub(lambda _m: _LOCAL_FONT, (templates / PAGE_TEMPLATE).read_text())


def monitor_command(
    run_dir: Path,
    theme: str | None = None,
    ascii: bool | None = None,
    refresh_s: float | None = None,
) -> str:
    """The shell command textual-serve runs for each browser tab: this interpreter's
    ``soaktop attach RUN_DIR`` with the display flags, every word quoted, as a page of
    this server (it ends if the server is killed: see :func:`page_main`)."""
    words = [sys.executable, "-m", "tui.serve", "page", str(os.getpid()), str(run_dir.resolve())]
    if theme is not None:
        words += ["--theme", theme]
    if ascii:
        words.append("--ascii")
    if refresh_s is not None:
        words += ["--refresh", repr(refresh_s)]
    return shlex.join(words)


def public_url(host: str, port: int) -> str:
    """The address the page's websocket dials (textual-serve writes it into the page):
    the bound host, or this machine's name for a wildcard bind."""
    if host in ("0.0.0.0", "::", ""):
        import socket

        host = socket.gethostname()
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}"


class MonitorServer(Server):
    """textual-serve's server with soaktop's own start-up line, and (for ``run --serve``)
    an end when the CLI that started it is gone, so a killed CLI leaves no server."""

    def __init__(self, command: str, run_dir: Path, host: str, port: int, parent_pid: int | None):
        super().__init__(
            command,
            host=host,
            port=port,
            title=f"soaktop {safe_line(run_dir.name)}",
            public_url=public_url(host, port),
        )
        self.run_dir = run_dir
        self.parent_pid = parent_pid
        self._watch: asyncio.Task[None] | None = None

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        aiohttp_jinja2.get_env(app).loader = jinja2.DictLoader(
            {PAGE_TEMPLATE: local_page(Path(self.templates_path))}
        )
        return app

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """A tab opened: one line saying from where (the page can stop the run), instead
        of aiohttp's access log of every file the page loads."""
        print(f"soaktop serve: a page opened from {safe_line(request.remote or '?')}", flush=True)
        return await super().handle_websocket(request)

    def serve(self, debug: bool = False) -> None:
        """textual-serve's ``serve`` with a short shutdown: after ``CLOSE_PAGES_S`` the
        pages are cut (each one's monitor is told to quit) instead of aiohttp's 60 s."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_exit)
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            handle_signals=False,
            loop=loop,
            print=lambda *_: None,
            access_log=None,
            shutdown_timeout=CLOSE_PAGES_S,
        )

    async def on_startup(self, app: web.Application) -> None:
        """Say where the monitor is (textual-serve's banner would show the command)."""
        print(
            f"soaktop serve: the monitor of {safe_line(self.run_dir)} at {self.public_url}/ "
            "(Ctrl-C stops serving; the run goes on)",
            flush=True,
        )
        if self.parent_pid is not None:
            self._watch = asyncio.create_task(self._watch_parent())

    async def _watch_parent(self) -> None:
        # No event tells a child that its parent died: re-parenting shows it.
        while os.getppid() == self.parent_pid:  # noqa: ASYNC110
            await asyncio.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)  # textual-serve's handler exits gracefully


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tui.serve")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--parent-pid", type=int, default=None)
    ap.add_argument("--theme", default=None)
    ap.add_argument("--ascii", action="store_const", const=True, default=None)
    ap.add_argument("--refresh", type=float, dest="refresh_s", default=None)
    return ap


def _end_with(server_pid: int) -> None:
    """Ask this page's monitor to end once the server that started it is gone."""
    while True:
        time.sleep(PARENT_POLL_S)
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:  # the pid was reused by another user's process
            break
    os.kill(os.getpid(), signal.SIGTERM)  # the monitor detaches (or leaves its replay)


def page_main(argv: Sequence[str]) -> int:
    """One browser tab: ``page SERVER_PID RUN_DIR [display flags]`` runs ``soaktop
    attach`` under the web driver textual-serve set, and ends with the server (a killed
    server cannot tell its pages; they would otherwise keep reading the run directory)."""
    threading.Thread(target=_end_with, args=(int(argv[0]),), daemon=True).start()
    from tui.entry import main as entry_main

    return entry_main(["attach", *argv[1:]])


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the monitor of one run directory until SIGINT/SIGTERM (the host, the port
    and the run directory were checked by ``soak.cli.serve``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["page"]:
        return page_main(args[1:])
    ns = _parser().parse_args(args)
    command = monitor_command(ns.run_dir, ns.theme, ns.ascii, ns.refresh_s)
    server = MonitorServer(command, ns.run_dir, ns.host, ns.port, ns.parent_pid)
    try:
        server.serve()
    except OSError as e:  # the port is taken, or the address is not this machine's
        print(
            f"soaktop serve: cannot listen on {ns.host}:{ns.port}: {safe_line(e)}",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
