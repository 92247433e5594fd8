"""The checks behind :class:`soak.run.config.RunConfig`'s validators: URLs, files, the log
and output paths, and programs on PATH.

Each returns why a value cannot be used, as the end of a sentence the validator completes
(None: it can be used); none raises for a path the operating system refuses to look at.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")


def url_problem(url: str, example: str = "http://127.0.0.1:8000") -> str | None:
    """Why ``url`` is not an http(s) URL soaktop can use (None: it is): a scheme, a host,
    a port in 1–65535, no credentials, query or fragment; a path prefix is allowed."""
    if _CONTROL.search(url):
        return f"{url!r} holds a space or control character; give a URL like {example}"
    try:
        parts = urlsplit(url)
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        return f"{url!r} is not a URL ({e}); give one like {example}"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{url!r} is not an http(s) URL like {example}"
    if parts.username is not None or parts.password is not None:
        return (
            "credentials inside an endpoint URL would be written to the run directory; "
            "give the key with --api-key-env VAR instead"
        )
    if not parts.hostname:
        return f"{url!r} has no host; give a URL like {example}"
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        given = parts.netloc.rsplit(":", 1)[-1]
        return f"{url!r}: port {given!r} is not a port number (allowed: 1 to 65535)"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return f"{url!r} holds a query or fragment; give the base URL only, like {example}"
    return None


def file_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable regular file (None: it is), as the end of a sentence."""
    try:
        if not path.exists():
            return "does not exist"
        if path.is_dir():
            return "is a directory, not a file"
        if not os.access(path, os.R_OK):
            return "cannot be read (permission denied)"
    except (OSError, ValueError) as e:
        return f"is not a usable path ({e})"
    return None


def log_problem(path: Path) -> str | None:
    """A server log: an existing one must be a readable file; one yet to appear needs its
    directory (the engine may create its log after soaktop starts)."""
    try:
        if path.exists():
            return file_problem(path)
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            return f"does not exist and neither does its directory {str(parent)!r}"
    except (OSError, ValueError) as e:
        return f"is not a usable path ({e})"
    return None


def out_problem(path: Path) -> str | None:
    """The output directory: an existing one must be a writable directory; a new one
    needs its nearest existing ancestor to be one (the runner creates the rest)."""
    try:
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if not probe.is_dir():
            where = "" if probe == path else f" ({str(probe)!r} is a file)"
            return f"is not a directory{where}"
        if not os.access(probe, os.W_OK | os.X_OK):
            return f"cannot be written ({str(probe)!r}: permission denied)"
    except (OSError, ValueError) as e:
        return f"is not a usable directory ({e})"
    return None


def which(program: str) -> str | None:
    """Where ``program`` is on PATH (None: nowhere, or PATH cannot be searched)."""
    try:
        return shutil.which(program)
    except (OSError, ValueError):
        return None
