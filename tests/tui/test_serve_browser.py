"""``soaktop serve``: the monitor in a real browser, through textual-serve.

Headless Chromium (the apt package ``chromium``; no browser download) is driven over the
DevTools protocol with aiohttp's websocket client. The terminal's text is read from
xterm.js's own buffer in the page (a hook on the page's terminal object, set before the
page's scripts run), so what is asserted is what a user sees in the tab. The screenshot
goes to the test's directory; ``SOAKTOP_UPDATE_DOCS=1`` also writes docs/serve.png.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import psutil
import pytest

from soak.cli.serve import host_problem
from tests.report.test_report import _chromium, png_content_rows
from tests.tui.helpers import HEALTHY

pytestmark = pytest.mark.e2e

DOCS_PNG = Path(__file__).parents[2] / "docs" / "serve.png"

# textual.js keeps its terminal in a closure; its constructor assigns `this.fitAddon`, and
# a setter on Object.prototype sees that one assignment and keeps the object for the test.
HOOK = """
Object.defineProperty(Object.prototype, "fitAddon", {
  configurable: true,
  set(v) {
    Object.defineProperty(this, "fitAddon", {value: v, writable: true, configurable: true});
    window.__soaktopTerm = this;
  },
});
"""
SCREEN_TEXT = """(() => {
  const t = window.__soaktopTerm && window.__soaktopTerm.terminal;
  if (!t) return null;
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) {
    const line = b.getLine(b.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


def _soaktop(*args: str) -> subprocess.Popen[str]:
    """The console script's code (``tui.entry``), which has the monitor."""
    return subprocess.Popen(
        [sys.executable, "-m", "tui.entry", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # a group to end whole if it does not end by itself
    )


def _end(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate(timeout=15)[0]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    """``soaktop serve`` on a free loopback port, for a copy of a finished run."""
    run = tmp_path / "run"
    shutil.copytree(HEALTHY, run)
    port = _free_port()
    proc = _soaktop("serve", str(run), "--port", str(port))
    try:
        _wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/", run, proc
    finally:
        _end(proc)


class Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.n = 0
        self.requested: list[str] = []  # every URL the page asked for (Network domain)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        await self.ws.send_json({"id": self.n, "method": method, "params": params})
        while True:
            msg = json.loads(await self.ws.receive_str())
            if msg.get("method") == "Network.requestWillBeSent":
                self.requested.append(msg["params"]["request"]["url"])
            if msg.get("id") == self.n:
                assert "error" not in msg, msg
                return dict(msg["result"])

    async def text(self) -> str | None:
        r = await self.call("Runtime.evaluate", expression=SCREEN_TEXT, returnByValue=True)
        value = r["result"].get("value")
        return value if isinstance(value, str) else None

    async def text_with(self, *needles: str, wait_s: float = 30) -> str:
        deadline = time.monotonic() + wait_s
        text: str | None = None
        while time.monotonic() < deadline:
            text = await self.text()
            if text is not None and all(n in text for n in needles):
                return text
            await asyncio.sleep(0.25)
        raise AssertionError(f"the page never showed {needles}; it showed:\n{text}")

    async def press(self, key: str, code: str, shift: bool = False) -> None:
        mods = 8 if shift else 0
        await self.call("Runtime.evaluate", expression="window.__soaktopTerm.terminal.focus()")
        await self.call(
            "Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key, modifiers=mods
        )
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, modifiers=mods)


def _browser(binary: str, profile: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            # Only loopback resolves: the page's web font (Google) is never fetched.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,720",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if port_file.exists() and (lines := port_file.read_text().splitlines()):
            return proc, int(lines[0])
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("Chromium did not open its DevTools port")


async def _open_page(session: aiohttp.ClientSession, devtools: int) -> str:
    async with session.get(f"http://127.0.0.1:{devtools}/json/list") as r:
        targets = await r.json()
    return str(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])


async def _drive(url: str, devtools: int, record: dict[str, Any]) -> tuple[bytes, list[str]]:
    """Load the page, check the panes and the help key; the screenshot of the panes and
    every URL the page requested."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(await _open_page(session, devtools), max_msg_size=0) as ws,
    ):
        page = Page(ws)
        await page.call("Page.enable")
        await page.call("Network.enable")
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=HOOK)
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=720,
            deviceScaleFactor=1,
            mobile=False,
        )
        await page.call("Page.navigate", url=url)
        # The panes with the run's figures, as the record has them.
        text = await page.text_with(
            record["run_id"],
            "PASSED",
            f"done {record['load']['completed']}",
            "json 24/24 PASS",
            "out tok/s",
            "TTFT",
        )
        assert "Keys" not in text
        png = base64.b64decode((await page.call("Page.captureScreenshot", format="png"))["data"])
        await page.press("?", "Slash", shift=True)  # the help: a key reached the app
        await page.text_with("Keys", "Quit")
    return png, page.requested


@pytest.mark.skipif(
    _chromium() is None,
    reason="headless Chromium not installed (apt-get install -y chromium); the browser "
    "test of soaktop serve did not run",
)
def test_the_monitor_runs_in_chromium_and_takes_keys(served, tmp_path):
    url, run, server = served
    binary = _chromium()
    assert binary is not None
    record = json.loads((run / "record.json").read_text())
    browser, devtools = _browser(binary, tmp_path / "profile")
    shot = tmp_path / "serve.png"
    try:
        png, requested = asyncio.run(asyncio.wait_for(_drive(url, devtools, record), 90))
        shot.write_bytes(png)
    finally:
        browser.kill()
        browser.wait()
    width, height, content = png_content_rows(shot.read_bytes())
    assert (width, height) == (1280, 720) and content > height // 4, "a blank page"
    if os.environ.get("SOAKTOP_UPDATE_DOCS") == "1":
        DOCS_PNG.write_bytes(shot.read_bytes())
    # Offline machines, and nobody else learns who watches: only this host is asked.
    assert any("/static/js/textual.js" in u for u in requested), requested
    beyond = [u for u in requested if urlsplit(u).hostname not in ("127.0.0.1", None)]
    assert not beyond, f"the page reached beyond the serving host: {beyond}"
    out = _end(server)
    assert f"soaktop serve: the monitor of {run} at {url}" in out
    assert "a page opened from 127.0.0.1" in out
    assert "GET /" not in out, f"aiohttp's access log in the serve output:\n{out}"


def test_serve_refuses_a_remote_bind_without_the_flag(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(HEALTHY, run)
    proc = _soaktop("serve", str(run), "--host", "0.0.0.0", "--port", str(_free_port()))
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 2
    assert "--host 0.0.0.0: not a loopback address" in out and "--allow-remote" in out
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert host_problem(host, allow_remote=False) is None
    assert host_problem("192.168.1.5", allow_remote=True) is None


def test_serve_refuses_what_is_not_a_run(tmp_path):
    proc = _soaktop("serve", str(tmp_path / "nothing"), "--port", str(_free_port()))
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 2 and "does not exist" in out


async def _live_screen(port: int) -> str:
    """What one page's monitor draws in its first seconds (ANSI codes stripped)."""
    buf = b""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{port}/ws?width=100&height=30") as ws,
    ):
        with contextlib.suppress(TimeoutError):
            while b"LIVE" not in buf or b"load " not in buf:
                msg = await asyncio.wait_for(ws.receive(), 10)
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
                buf += msg.data
    return re.sub(rb"\x1b\[[0-9;?]*[a-zA-Z]", b"", buf).decode(errors="replace")


def test_demo_serve_shows_the_live_run_and_stops_serving_after_it(tmp_path):
    port = _free_port()
    proc = _soaktop(
        "demo", "--duration", "8", "--concurrency", "4", "--no-gates", "--headless",
        "--out", str(tmp_path), "--serve", str(port),
    )  # fmt: skip
    try:
        _wait_port(port, proc)
        screen = asyncio.run(_live_screen(port))
        out = proc.communicate(timeout=90)[0]
    finally:
        _end(proc)
    assert "LIVE" in screen and "load " in screen, screen
    assert proc.returncode == 0, out
    assert f"live monitor in a browser: http://127.0.0.1:{port}/" in out
    with pytest.raises(OSError):  # the server went with the run
        socket.create_connection(("127.0.0.1", port), 0.5).close()


def _packets(stream: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """textual-serve's reading of a page's stdout: its packets, and what did not parse."""
    out = []
    while len(stream) >= 5 and stream[:1] in (b"D", b"M", b"P"):
        size = int.from_bytes(stream[1:5], "big")
        if len(stream) < 5 + size:
            break
        out.append((stream[:1], stream[5 : 5 + size]))
        stream = stream[5 + size :]
    return out, stream


def test_a_page_writes_only_protocol_packets_to_its_pipe(tmp_path):
    """A page's stdout is textual-serve's protocol stream: the monitor's closing message
    (printed on a terminal once the app is gone) must not follow the exit packet."""
    run = tmp_path / "run"
    shutil.copytree(HEALTHY, run)
    (run / "record.json").unlink()  # a run still going: the page attaches (not a replay)
    (run / "runner.pid").unlink(missing_ok=True)
    env = os.environ | {
        "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver",
        "COLUMNS": "100",
        "ROWS": "30",
    }
    page = subprocess.Popen(
        [sys.executable, "-m", "tui.serve", "page", str(os.getpid()), str(run)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert page.stdout is not None and page.stdin is not None
        assert page.stdout.readline() == b"__GANGLION__\n"
        time.sleep(2)  # the replay is on its screen
        quit_meta = json.dumps({"type": "quit"}).encode()
        page.stdin.write(b"M" + len(quit_meta).to_bytes(4, "big") + quit_meta)
        page.stdin.flush()
        stream, err = page.communicate(timeout=30)
    finally:
        if page.poll() is None:
            page.kill()
            page.wait()
    packets, rest = _packets(stream)
    assert packets and packets[-1] == (b"M", b'{"type": "exit"}'), packets[-3:]
    assert rest == b"", f"bytes after the protocol's packets: {rest[:200]!r} (stderr: {err!r})"


def test_the_page_names_no_other_host_and_serve_logs_no_requests(served):
    """Without a browser: the page's HTML loads nothing from beyond the serving host (no
    web font from Google), its font is served here, and no access log reaches the output."""
    url, _run, server = served

    async def fetch() -> tuple[str, int]:
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as r:
                html = await r.text()
            async with session.get(url + "static/fonts/RobotoMono-VariableFont_wght.ttf") as r:
                return html, r.status

    html, font_status = asyncio.run(fetch())
    urls = re.findall(r"""(?:href|src)\s*=\s*["']([^"']+)|url\(\s*["']?([^"')]+)""", html)
    hosts = {urlsplit(a or b).hostname for a, b in urls}
    assert hosts == {"127.0.0.1"}, hosts
    assert "fonts.googleapis.com" not in html
    assert "RobotoMono-VariableFont_wght.ttf" in html and font_status == 200
    out = _end(server)
    assert "GET /" not in out, out


def _tree(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _gone_within(procs: list[psutil.Process], wait_s: float) -> list[str]:
    _gone, alive = psutil.wait_procs(procs, timeout=wait_s)
    return [" ".join(p.cmdline()) for p in alive if p.is_running()]


async def _serve_envs(port: int, cli_pid: int) -> dict[str, dict[str, str]]:
    """The environments of the web server and of a page's monitor, while a page is open."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{port}/ws?width=80&height=24") as ws,
    ):
        await asyncio.wait_for(ws.receive(), 20)  # the page's monitor drew
        envs = {}
        for p in _tree(cli_pid):
            with contextlib.suppress(psutil.Error):
                if "tui.serve" in (cmd := p.cmdline()):
                    envs[" ".join(cmd[1:4])] = p.environ()
    assert any(" page " in f" {who} " for who in envs), list(envs)
    return envs


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_server_or_page_outlives_the_serve_cli(served, how):
    """Ctrl-C, or a SIGKILL the CLI cannot answer: the web server and each open page's
    monitor end too (within a few seconds), none is left reading the run directory."""
    url, _run, server = served

    async def open_page_then_signal() -> list[psutil.Process]:
        ws_url = url.replace("http:", "ws:") + "ws?width=80&height=24"
        async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
            await asyncio.wait_for(ws.receive(), 20)  # the page's monitor drew
            procs = _tree(server.pid)
            assert any("page" in p.cmdline() for p in procs), [p.cmdline() for p in procs]
            server.send_signal(how)
            return procs

    procs = asyncio.run(open_page_then_signal())
    server.wait(15)
    left = _gone_within(procs, 10)
    assert not left, f"left running after {how.name} of the CLI: {left}"


def test_run_serve_keeps_header_secrets_out_of_the_monitor_processes(tmp_path):
    """``--header NAME: env:VAR`` and ``--api-key-env``: the variables the run reads its
    secrets from are in the runner's environment only, never the web server's or a
    page's (``/proc/PID/environ`` is readable for a process's whole life)."""
    from soak.cli.demo import simulated_engine

    port = _free_port()
    secrets = {"R8_TENANT_TOKEN": "tenant-secret-1234", "R8_API_KEY": "sk-r8-secret-5678"}
    with simulated_engine(replicas=1, gpus_per_replica=1) as sim:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "tui.entry", "run", "--model", sim.model,
                "--endpoint", sim.urls[0], "--out", str(tmp_path), "--headless",
                "--duration", "6", "--concurrency", "2", "--no-gates",
                "--header", "X-Tenant: env:R8_TENANT_TOKEN", "--api-key-env", "R8_API_KEY",
                "--serve", str(port),
            ],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=os.environ | secrets | {"PYTHONUNBUFFERED": "1"}, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_port(port, proc)
            envs = asyncio.run(_serve_envs(port, proc.pid))
            out = proc.communicate(timeout=90)[0]
        finally:
            _end(proc)
    assert proc.returncode == 0, out
    assert len(envs) >= 1, "no web server process found"
    for who, env in envs.items():
        leaked = sorted(k for k in secrets if k in env) + sorted(
            k for k, v in env.items() if any(s in v for s in secrets.values())
        )
        assert not leaked, f"{who}: {leaked} in its environment"


def test_serve_keeps_the_runs_secret_variables_from_its_pages(tmp_path):
    """``soaktop serve`` in the shell that started the run: the variables its
    ``config.json`` names (API key, ``env:`` headers) are not passed to the pages."""
    run = tmp_path / "run"
    shutil.copytree(HEALTHY, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg |= {"api_key_env": "R8_KEY", "headers": ["X-Tenant: env:R8_TOK", "X-A: <redacted>"]}
    (run / "config.json").write_text(json.dumps(cfg))
    secrets = {"R8_KEY": "sk-r8-1234", "R8_TOK": "tok-r8-5678", "R8_COPY": "tok-r8-5678"}
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui.entry", "serve", str(run), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | secrets,
        start_new_session=True,
    )
    try:
        _wait_port(port, proc)
        envs = asyncio.run(_serve_envs(port, proc.pid))
    finally:
        _end(proc)
    for who, env in envs.items():
        assert not sorted(set(secrets) & set(env)), f"{who}: {sorted(set(secrets) & set(env))}"
        assert "PATH" in env  # the rest of the environment is kept
