"""The per-field checks of :class:`soak.run.config.RunConfig` beyond type and range.

Each is an ``AfterValidator`` on its field (``Annotated[..., After(check)]``), so the model
module holds the fields and their docstrings and this one the rules: a URL that is http(s)
with a host and a port, a file that exists and parses, a command on PATH, a live pid, a
matrix or warm-up in its grammar. Each raises ``ValueError`` with the words the operator
reads (:mod:`soak.run.config_words` adds the field, where it came from and the value).
"""

from __future__ import annotations

from pathlib import Path

from soak.run.config_checks import file_problem, log_problem, out_problem, url_problem
from soak.run.config_telemetry import command_problem


def checked_endpoints(v: list[str]) -> list[str]:
    """Each endpoint an http(s) URL; kept without a trailing ``/`` or ``/v1``."""
    out = []
    for url in v:
        if (why := url_problem(url)) is not None:
            raise ValueError(why)
        out.append(url.rstrip("/").removesuffix("/v1"))
    return out


def checked_dcgm(v: list[str]) -> list[str]:
    """Each DCGM exporter an http(s) URL."""
    for url in v:
        if (why := url_problem(url, example="http://gpu-node:9400/metrics")) is not None:
            raise ValueError(why)
    return v


def checked_warmup(v: str | None) -> str | None:
    """A warm-up in its grammar (seconds or requests)."""
    from soak.run.warmup import parse_warmup

    if v is not None:
        parse_warmup(v)  # raises with the words: what was given and what is allowed
    return v


def checked_commands(v: list[str]) -> list[str]:
    """Each server-log command parses and its program is on PATH."""
    for cmd in v:
        if (why := command_problem(cmd)) is not None:
            raise ValueError(why)
    return v


def checked_server_cmd_file(v: Path | None) -> Path | None:
    """The server command file reads as one."""
    from soak.run.recipe_probe import read_server_cmd

    if v is not None:
        try:
            read_server_cmd(v)
        except ValueError as e:
            raise ValueError(f"server command file {str(v)!r} {e}") from None
    return v


def checked_prompts(v: Path | None) -> Path | None:
    """The prompts file exists and is readable."""
    if v is not None and (why := file_problem(v)) is not None:
        raise ValueError(f"prompts file {str(v)!r} {why}")
    return v


def checked_suite_files(v: list[Path]) -> list[Path]:
    """Each suite file exists and is readable."""
    for path in v:
        if (why := file_problem(path)) is not None:
            raise ValueError(f"suite file {str(path)!r} {why}")
    return v


def checked_server_logs(v: list[Path]) -> list[Path]:
    """Each server log readable, or (not there yet) its directory there."""
    # The engine may create its log after soaktop starts (it is waited for), so only
    # an existing path must be a readable file; a missing one needs its directory.
    for path in v:
        why = log_problem(path)
        if why is not None:
            raise ValueError(f"server log {str(path)!r} {why}")
    return v


def checked_out(v: Path) -> Path:
    """The output directory can hold run directories."""
    if (why := out_problem(v)) is not None:
        raise ValueError(f"{str(v)!r} {why}")
    return v


def checked_server_pids(v: list[int]) -> list[int]:
    """Each server pid a live process soaktop may watch."""
    from soak.watch.host import check_server_pid

    for pid in v:
        if (why := check_server_pid(pid)) is not None:
            raise ValueError(f"{pid}: {why}")
    return v


def checked_matrix(v: str | None) -> str | None:
    """A matrix in its grammar, kept in its normal form."""
    from soak.record.matrix import MatrixError, parse_matrix

    if v is None:
        return None
    try:
        return parse_matrix(v).text()
    except MatrixError as e:
        raise ValueError(str(e).removeprefix("matrix: ")) from None
