"""TLS to the server: ``--ca-cert FILE`` (a CA bundle to trust, PEM), ``--client-cert FILE``
and ``--client-key FILE`` (mutual TLS), and one ``ssl.SSLContext`` built from them for
every HTTP client of a process — aiohttp's load connector and the httpx clients of the
gates, the identity probe and the engine scrapes alike (:func:`verify`).

Each process (the runner, each load shard) calls :func:`configure` once, before its first
request, with the files from the run's config; the files are read there, so a bad
certificate is an error before any load, in words naming the file and OpenSSL's reason.
Without ``--ca-cert`` the system's trust store is used (a private CA's server then fails
its handshake before the load: the error names the certificate problem). Certificate
verification and host-name checking are never turned off: an insecure mode would measure
a server nobody proved to be the one meant.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TlsError",
    "TlsFiles",
    "check_pem",
    "configure",
    "context",
    "tls_hint",
    "verify",
]


class TlsError(ValueError):
    """A certificate or key that cannot be used, in words."""


@dataclass(frozen=True)
class TlsFiles:
    """The TLS files of a run (paths as text, so a shard's JSON spec can carry them)."""

    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    @classmethod
    def of(cls, cfg: object) -> TlsFiles:
        """The files named by a config's ``ca_cert``, ``client_cert``, ``client_key``."""
        names = ("ca_cert", "client_cert", "client_key")
        values = [getattr(cfg, n, None) for n in names]
        return cls(*(None if v is None else str(v) for v in values))

    def spec(self) -> dict[str, str | None] | None:
        """For a shard's JSON spec (``StreamClient(tls=...)``); None when empty."""
        return None if self.empty else dict(vars(self))

    @property
    def empty(self) -> bool:
        return self.ca_cert is None and self.client_cert is None and self.client_key is None


def check_pem(path: Path | None) -> Path | None:
    """A config field's check: the file exists, is readable and looks like PEM."""
    if path is None:
        return None
    try:
        head = path.read_bytes()[: 1 << 16]
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
    if b"-----BEGIN " not in head:
        raise ValueError(f"{path}: not a PEM file (no '-----BEGIN' line); allowed: PEM")
    return path


def context(files: TlsFiles) -> ssl.SSLContext | None:
    """The client SSLContext for these files; None when none is given (the defaults)."""
    if files.empty:
        return None
    ctx = ssl.create_default_context()
    if files.ca_cert is not None:
        try:
            ctx.load_verify_locations(cafile=files.ca_cert)
        except (ssl.SSLError, OSError) as e:
            raise TlsError(f"--ca-cert {files.ca_cert}: not a usable CA bundle ({e})") from None
    if files.client_cert is not None:
        try:
            ctx.load_cert_chain(files.client_cert, files.client_key)
        except (ssl.SSLError, OSError) as e:
            key = f" with --client-key {files.client_key}" if files.client_key else ""
            raise TlsError(
                f"--client-cert {files.client_cert}{key}: not a usable certificate and key "
                f"({e}); give the PEM certificate and, unless it holds it, its key"
            ) from None
    elif files.client_key is not None:
        raise TlsError("--client-key without --client-cert: give the certificate too")
    return ctx


_PROCESS: list[ssl.SSLContext | None] = [None]


def configure(files: TlsFiles) -> ssl.SSLContext | None:
    """Build this process's context (raises TlsError in words) and keep it for
    :func:`verify`; returns it (None: the defaults)."""
    ctx = context(files)
    _PROCESS[0] = ctx
    _FILES[0] = files
    return ctx


def verify() -> ssl.SSLContext | bool:
    """httpx's ``verify=``: this process's context, or True (the system trust store)."""
    ctx = _PROCESS[0]
    return ctx if ctx is not None else True


def aiohttp_ssl() -> ssl.SSLContext | bool:
    """aiohttp's ``ssl=``: this process's context, or True (default verification)."""
    return verify()


def tls_hint(url: str, error: str) -> str:
    """Words to add to a failed first request to an https ``url``: what the error means
    for TLS and which option fixes it ("" when there is nothing to add)."""
    if not url.startswith("https:"):
        return ""
    if "CERTIFICATE_VERIFY_FAILED" in error:
        given = " (the --ca-cert given did not sign it)" if _given("ca_cert") else ""
        return (
            f"; the server's certificate is not trusted{given}: give its CA bundle with "
            "--ca-cert PEM"
        )
    mtls = "disconnected without" in error or "CERTIFICATE_REQUIRED" in error
    if mtls and not _given("client_cert"):
        return (
            "; a TLS server that requires a client certificate (mutual TLS) closes "
            "the connection like this: give --client-cert PEM (and --client-key PEM)"
        )
    return ""


def _given(what: str) -> bool:
    """This process was configured with a CA bundle / client certificate."""
    return getattr(_FILES[0], what) is not None


_FILES: list[TlsFiles] = [TlsFiles()]
