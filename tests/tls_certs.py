"""Certificates made at test time with the openssl CLI: a CA, a server certificate for
127.0.0.1 / localhost signed by it, a client certificate signed by it, and a second CA
that signed nothing here (the wrong bundle)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    """The PEM files of one test's TLS set."""

    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=soaktop test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)  # fmt: skip


def _leaf(d: Path, name: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
             "-extfile", f"{name}.ext", cwd=d)  # fmt: skip


def make_certs(d: Path) -> Certs:
    """Write the set into ``d`` (requires the openssl CLI)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl CLI is needed to make test certificates")
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other")
    _leaf(d, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                       "extendedKeyUsage=serverAuth\n")  # fmt: skip
    _leaf(d, "client", "extendedKeyUsage=clientAuth\n")
    return Certs(
        ca=d / "ca.pem",
        other_ca=d / "other.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
    )
