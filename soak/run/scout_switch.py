"""Switch the servers to a scout's arm, wait until they serve it, and ask who they are.

A switch is the operator's shell command (``./switch.sh candidate``: stop the server,
start it with the arm's flags). It runs with the caller's working directory in its own
session, so a timeout can stop it and everything it started but has not detached, and so
a Ctrl-C in the terminal is the scout's to handle. Its output is written to the switch's
log once it has exited, scrubbed of secrets (the command line is the operator's and may
carry an API key or a token, as a ``--server-cmd-file`` may): what
:func:`soak.record.redact_patterns.scrub_secrets` finds (API keys, auth headers, bearer
tokens, secret-named variables and flags, well-known token shapes) and the run's own API
key never reach the log. A server the script starts in the background should write its
own log: what it prints after the script has exited is not in the switch's log.

Then every endpoint must answer ``GET /health`` with 200 and list the model in
``GET /v1/models``, within the same deadline; then their identity is probed exactly as a
run probes it (:func:`soak.run.identity.probe_all`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import httpx

from loadgen.headers import secret_values
from loadgen.tls import verify
from soak.record.models import EndpointIdentity
from soak.record.redact_patterns import SECRET_MARK
from soak.record.redact_patterns import scrub_secrets as scrub_command
from soak.run.identity import probe_all

READY_POLL_S = 0.5
"""How often the endpoints are asked while the server comes up."""
READY_REQUEST_TIMEOUT_S = 5.0
"""One /health or /v1/models request while waiting (a hung one is tried again)."""
STOP_GRACE_S = 5.0
"""After SIGTERM to a switch that ran too long, how long before SIGKILL."""
MAX_LOG_BYTES = 1_000_000
"""The switch's output kept in its log (the end of it, when longer)."""


def scrub_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret (the run's API key) and every credential a launch
    command can hold replaced (:func:`soak.record.redact_patterns.scrub_secrets`, as for
    ``--server-cmd-file``)."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, SECRET_MARK)
    return scrub_command(text)


class _Scrub:
    """The secrets out of a switch's log, then the run's own redaction (``--redact``)."""

    def __init__(self, secrets: list[str], clean: Callable[[str], str] | None) -> None:
        self.secrets, self.clean = secrets, clean

    def __call__(self, text: str) -> str:
        text = scrub_secrets(text, self.secrets)
        return self.clean(text) if self.clean is not None else text


class SwitchError(RuntimeError):
    """The switch failed: its command, the endpoints' readiness or their identity. The
    message says which and where the switch's log is."""


@dataclass
class Switched:
    """A switch that worked: how long it took and who the endpoints say they are."""

    log: Path
    command_s: float
    ready_s: float
    endpoints: list[EndpointIdentity] = field(default_factory=list)


def run_command(
    command: str,
    log: Path,
    deadline: float,
    secrets: Iterable[str] = (),
    title: str = "",
    clean: Callable[[str], str] | None = None,
) -> float:
    """Run ``command`` (``/bin/sh -c``) to its end, before ``deadline`` (monotonic);
    its scrubbed output in ``log`` (then through ``clean``: the run's redactor). Seconds
    it took; :class:`SwitchError` when it failed or ran out of time. An interrupt (Ctrl-C)
    stops it and is raised again."""
    secrets = list(secrets)
    scrub = _Scrub(secrets, clean)
    started = time.monotonic()
    rc: int | None = None
    # An unnamed file, not a pipe: a server the script leaves running keeps it open, and a
    # pipe would then never reach its end (or, closed, kill that server on its next
    # write). Unnamed: the output before scrubbing never has a path, and a crash leaves
    # nothing of it behind.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=max(0.0, deadline - started))
        except subprocess.TimeoutExpired:
            _stop(proc)
        except BaseException:  # Ctrl-C: stop the switch too, then let the scout say so
            _stop(proc)
            _write_log(log, out, command, None, time.monotonic() - started, scrub, title)
            raise
        took = time.monotonic() - started
        _write_log(log, out, command, rc, took, scrub, title)
    if rc is None:
        raise SwitchError(f"the switch command ran longer than its {took:.0f} s; see {log}")
    if rc != 0:
        raise SwitchError(f"the switch command exited with {rc} after {took:.1f} s; see {log}")
    return took


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the switch's process group, SIGKILL it after a grace."""
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _write_log(
    log: Path,
    raw: BinaryIO,
    command: str,
    rc: int | None,
    took_s: float,
    scrub: Callable[[str], str],
    title: str,
) -> None:
    """The switch's log: what ran, how it ended, its output — all scrubbed."""
    try:
        size = os.fstat(raw.fileno()).st_size
        raw.seek(max(0, size - MAX_LOG_BYTES))
        output = raw.read(MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        size, output = 0, ""
    ended = "did not finish (stopped)" if rc is None else f"exited with {rc}"
    head = [
        f"# soaktop scout: {title}" if title else "# soaktop scout: switch",
        f"# command: {command}",
        f"# cwd: {os.getcwd()}",
        f"# {ended} after {took_s:.1f} s",
    ]
    if size > MAX_LOG_BYTES:
        head.append(f"# output: its last {MAX_LOG_BYTES:,} of {size:,} bytes")
    log.write_text(scrub("\n".join(head) + "\n" + output))


def _not_ready(client: httpx.Client, base: str, model: str) -> str | None:
    """Why ``base`` is not serving ``model`` yet (None: it is)."""
    try:
        h = client.get(f"{base}/health")
        if h.status_code != 200:
            return f"/health answered HTTP {h.status_code}"
        m = client.get(f"{base}/v1/models")
        if m.status_code != 200:
            return f"/v1/models answered HTTP {m.status_code}"
        ids = [d.get("id") for d in m.json().get("data", []) if isinstance(d, dict)]
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    except (ValueError, AttributeError):
        return "/v1/models did not answer the OpenAI list shape"
    if model not in ids:
        shown = ", ".join(repr(str(i))[:80] for i in ids[:5]) or "none"
        return f"/v1/models does not list {model!r} (it lists {shown})"
    return None


def wait_ready(endpoints: list[str], model: str, headers: dict[str, str], deadline: float) -> float:
    """Wait until every endpoint answers /health 200 and lists ``model`` (before
    ``deadline``, monotonic): seconds waited, or :class:`SwitchError` naming each
    endpoint that was not ready and why."""
    started = time.monotonic()
    timeout = httpx.Timeout(READY_REQUEST_TIMEOUT_S)
    waiting: dict[str, str] = {}
    with httpx.Client(timeout=timeout, headers=headers, verify=verify()) as client:
        while True:
            waiting = {
                base: why
                for base in endpoints
                if (why := _not_ready(client, base, model)) is not None
            }
            if not waiting:
                return time.monotonic() - started
            if time.monotonic() + READY_POLL_S > deadline:
                break
            time.sleep(READY_POLL_S)
    took = time.monotonic() - started
    raise SwitchError(
        f"after {took:.0f} s the endpoints did not serve {model!r}: "
        + "; ".join(f"{base}: {why}" for base, why in waiting.items())
    )


def switch_to(
    command: str,
    log: Path,
    *,
    endpoints: list[str],
    model: str,
    headers: dict[str, str],
    timeout_s: float,
    engine: str | None = None,
    title: str = "",
    clean: Callable[[str], str] | None = None,
) -> Switched:
    """Run the switch, wait for the endpoints, probe their identity — all within
    ``timeout_s`` (``engine``: ``--engine``, which configuration endpoint to ask).
    :class:`SwitchError` says which part failed."""
    deadline = time.monotonic() + timeout_s
    # The credential-like headers' values; an env: value of another name is the run's
    # redactor's (``clean``), which knows where each value came from.
    secrets = secret_values((), headers)
    command_s = run_command(command, log, deadline, secrets, title, clean)
    ready_s = wait_ready(endpoints, model, headers, deadline)
    probed = asyncio.run(probe_all(endpoints, headers, engine=engine))
    down = [e for e in probed if not e.reachable or e.error]
    if down:
        raise SwitchError(
            "the endpoints were ready but their identity could not be read: "
            + "; ".join(f"{e.url}: {e.error or 'unreachable'}" for e in down)
        )
    return Switched(log=log, command_s=command_s, ready_s=ready_s, endpoints=probed)
