"""The run's redactor: its salt, what it learns before the first write, and the writers.

- :func:`load_salt`: the per-machine salt of the pseudonyms, ``soaktop/redact-salt`` under
  ``$XDG_CONFIG_HOME`` (default ``~/.config``), created once with mode 0600. It lives
  outside every run directory, so run directories can be handed out while their
  pseudonyms stay irreversible; copy it to another machine to share pseudonyms with it.
- :func:`run_redactor`: a redactor that already knows the configuration's private values
  (endpoints, DCGM exporters, server-log paths and commands, prompt and suite files, the
  output directory, this machine's host name, a model that is a path).
- :func:`learn_dcgm`: one scrape of each DCGM exporter before anything is written, so its
  ``Hostname`` labels are known before a server's first answer could name them.
- :class:`RedactingWriter`: a journal whose every line passes the redactor.
- :class:`RedactingStream`: ``runner.log``'s Python-level stdout/stderr, scrubbed per line.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import shlex
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import httpx
import orjson

from loadgen.headers import secret_values as header_secrets
from probes.dcgm import scrape_dcgm
from soak.record.journal import JsonlWriter
from soak.record.redact import Redactor
from soak.run.config import RunConfig

SALT_BYTES = 32
LOG_COMMANDS = frozenset({"docker", "podman", "nerdctl", "kubectl", "oc", "crictl"})
"""Commands whose last argument names a container or pod (``docker logs -f NAME``)."""


def salt_file() -> Path:
    """Where this machine's redaction salt lives."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "soaktop" / "redact-salt"


def load_salt(path: Path | None = None) -> tuple[bytes, str | None]:
    """This machine's salt, created (0600) on first use; and a problem in words when it
    could be neither read nor created (the salt is then random: pseudonyms hold within
    this run only)."""
    path = path or salt_file()
    try:
        return bytes.fromhex(path.read_text().strip()), None
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as e:
        return secrets.token_bytes(SALT_BYTES), f"redaction salt {path} unreadable ({e})"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another run created it a moment ago
        return load_salt(path)
    except OSError as e:
        return secrets.token_bytes(SALT_BYTES), f"redaction salt {path} not created ({e})"
    salt = secrets.token_bytes(SALT_BYTES)
    with os.fdopen(fd, "w") as fh:
        fh.write(salt.hex() + "\n")
    return salt, None


def _path_values(config: RunConfig) -> list[str]:
    paths = [str(config.out), str(config.out.resolve())]
    paths += [str(p) for p in (config.prompts, *config.suite_files, *config.server_log) if p]
    paths += [str(config.trace_file)] if config.trace_file else []
    if config.mix is not None:  # the mix file and its classes' prompt files
        paths += [config.mix.file, *(c.prompts for c in config.mix.classes if c.prompts)]
    return paths


def run_redactor(config: RunConfig, secret_values: list[str], salt: bytes | None) -> Redactor:
    """The run's redactor, with every private value of the configuration learned."""
    red = Redactor(config.endpoints, config.redact, secret_values, salt=salt, dcgm=config.dcgm)
    if not config.redact:
        return red
    red.learn_model(config.model)
    host = socket.gethostname()
    for name in {host, host.split(".", 1)[0]}:
        red.learn("host", name)
    for p in _path_values(config):
        learn_path(red, p)
    for cmd in config.server_log_cmd:
        args = shlex.split(cmd)
        for a in args:
            if a.startswith(("/", "~", "./", "../")):
                learn_path(red, a)
        if args and Path(args[0]).name in LOG_COMMANDS and not args[-1].startswith("-"):
            red.learn("container", args[-1])
    return red


async def redactor_for_run(
    config: RunConfig, headers: dict[str, str]
) -> tuple[Redactor, str | None]:
    """The runner's redactor (secrets from the auth headers) and, when the salt could not
    be kept, why (pseudonyms then hold within the run only)."""
    # Only the secrets (env: values, credential-like names): a literal ``X-Tenant: team``
    # is the user's own word, and redacting it would mangle every "team" in the logs.
    secrets = header_secrets(config.headers, headers)
    salt, problem = load_salt() if config.redact else (None, None)
    red = run_redactor(config, secrets, salt)
    await learn_dcgm(red, list(config.dcgm))
    return red, problem


def run_id_model(red: Redactor, model: str) -> str:
    """The model part of the run id: a model that is a path gives only its last part with
    ``--redact`` (the run id names the run directory, which is written everywhere)."""
    shown = red.learn_model(model)
    return shown.rsplit("/", 1)[-1] if shown != model else model


def learn_path(red: Redactor, value: str) -> None:
    """A configured path: an absolute one has a shape the redactor finds anyway; a relative
    one is learned when it has a directory part (a bare ``prompts.jsonl`` would turn every
    mention of the word into a pseudonym)."""
    if value.startswith(("/", "~")) or "/" in value.strip("./"):
        red.learn("path", value)


async def learn_dcgm(red: Redactor, urls: list[str], timeout_s: float = 3.0) -> None:
    """Scrape each DCGM exporter once and learn its GPUs' host names and UUIDs (a server
    may name its node in ``/version`` before the GPU watch's first scrape)."""
    if not red.enabled or not urls:
        return
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s)) as client:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s + 1):
                samples = await asyncio.gather(*(scrape_dcgm(client, u, 0) for u in urls))
                for s in samples:
                    for r in s.readings:
                        red.obj({"host": r.host, "uuid": r.uuid})


def log_redactor(run_dir: Path, config: RunConfig | None) -> Redactor | None:
    """A redactor for copying server logs into ``run_dir`` after its run (the demo), or
    None when there is nothing to scrub. Without ``config`` only the run's config.json
    says whether ``--redact`` was on (and no API key can be known)."""
    if config is None:
        try:
            redact = bool(orjson.loads((run_dir / "config.json").read_bytes()).get("redact"))
        except (OSError, orjson.JSONDecodeError, AttributeError):
            redact = True  # unknown: scrub rather than leak
        return Redactor([], True, salt=load_salt()[0]) if redact else None
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if not config.redact and not key:
        return None
    red = run_redactor(config, [key] if key else [], load_salt()[0] if config.redact else None)
    learn_path(red, str(run_dir))
    asyncio.run(learn_dcgm(red, list(config.dcgm)))
    return red


class RedactingWriter(JsonlWriter):
    """A journal whose lines pass :meth:`Redactor.json_line` before they are written."""

    def __init__(
        self,
        path: Path,
        redactor: Redactor,
        on_error: Callable[[JsonlWriter, OSError], None] | None = None,
    ) -> None:
        super().__init__(path, on_error)
        self.redactor = redactor

    def write_raw(self, line: bytes) -> None:
        """Append one pre-serialized JSON line, scrubbed."""
        super().write_raw(self.redactor.json_line(line))


class RedactingStream(io.TextIOBase):
    """A text stream that scrubs each line before passing it on (``runner.log``: prints,
    warnings and tracebacks from Python code). Output written below Python (a crash of C
    code, a core message of the interpreter) does not pass through it."""

    def __init__(self, target: TextIO, redactor: Redactor) -> None:
        self._target = target
        self._redactor = redactor
        self._pending = ""
        self._lock = threading.Lock()  # the NVML threads may print too

    def writable(self) -> bool:
        """Always."""
        return True

    def write(self, s: str) -> int:
        """Buffer to the end of a line, then write it scrubbed."""
        with self._lock:
            self._pending += s
            if "\n" in self._pending:
                done, _, self._pending = self._pending.rpartition("\n")
                self._target.write(self._redactor.file_text(done + "\n"))
                self._target.flush()
        return len(s)

    def flush(self) -> None:
        """Write a partial line too (before a crash nothing is kept back)."""
        with self._lock:
            if self._pending:
                self._target.write(self._redactor.file_text(self._pending))
                self._pending = ""
            self._target.flush()

    def fileno(self) -> int:
        """The target's descriptor (faulthandler and subprocesses write there directly)."""
        return self._target.fileno()
