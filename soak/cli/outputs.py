"""``--junit FILE`` and ``--summary-md FILE`` on ``run`` and ``demo``, and the
``soaktop junit`` / ``soaktop summary-md`` commands for a run directory.

The runner writes the record; these outputs are made from it (:mod:`soak.outputs`) by the
CLI once the runner has ended. Their paths are checked before anything starts (a JUnit
path in a missing directory is a usage error, not a lost report after a two-hour soak).
If the CLI detaches (the run goes on), the record does not exist yet: the CLI says which
command writes each file once the run has ended.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from soak.record.models import (
    EXIT_DETACHED_OPERATOR,
    EXIT_DETACHED_SIGNAL,
    EXIT_STORAGE,
    EXIT_USAGE,
)
from soak.safe_text import safe_line

if TYPE_CHECKING:
    from soak.after.run_view import RunView

_FLAGS = {
    "--junit": (
        "junit",
        "write the gates, thresholds and verdict as JUnit XML to FILE once the run ends "
        "(replaced if it exists)",
    ),
    "--summary-md": (
        "summary_md",
        "append the verdict and the seed-000 table as Markdown to FILE once the run ends "
        "(e.g. $GITHUB_STEP_SUMMARY)",
    ),
}


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """``--junit FILE`` and ``--summary-md FILE`` on ``run`` or ``demo``."""
    for flag, (dest, words) in _FLAGS.items():
        p.add_argument(flag, type=Path, dest=dest, metavar="FILE", default=None, help=words)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``junit`` and ``summary-md``, and the output flags on ``run`` and ``demo``
    (after ``scout`` took run's flags: a scout's arms have no one record to report)."""
    for name in ("run", "demo"):
        add_output_flags(sub.choices[name])
    junit = sub.add_parser(
        "junit", help="a finished run's gates, thresholds and verdict as JUnit XML"
    )
    junit.add_argument("run_dir", type=Path)
    junit.add_argument("-o", "--output", type=Path, metavar="FILE", help="default: stdout")
    junit.set_defaults(handler=cmd_junit)
    md = sub.add_parser("summary-md", help="a finished run's verdict and table as Markdown")
    md.add_argument("run_dir", type=Path)
    md.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="append to FILE (default: stdout)"
    )
    md.set_defaults(handler=cmd_summary_md)


def path_problem(flag: str, path: Path) -> str | None:
    """Why ``path`` cannot receive ``flag``'s output, in words (None: it can)."""
    where = path.parent if str(path.parent) else Path(".")
    try:  # a name too long, a loop of links: the OS says why, never a traceback
        if path.is_dir():
            return f"{flag} {safe_line(path)}: is a directory; give a file path"
        if not where.is_dir():
            return f"{flag} {safe_line(path)}: the directory {safe_line(where)} does not exist"
        if not os.access(where, os.W_OK | os.X_OK) or (
            path.exists() and not os.access(path, os.W_OK)
        ):
            return f"{flag} {safe_line(path)}: cannot be written (permission denied)"
    except OSError as e:
        return f"{flag} {safe_line(path)}: cannot be used: {e.strerror or e}"
    return None


def outputs_refused(ns: argparse.Namespace) -> bool:
    """Print why an output path cannot be used; True when one cannot (nothing started)."""
    problems = [
        why
        for flag, (dest, _) in _FLAGS.items()
        if (path := getattr(ns, dest, None)) is not None and (why := path_problem(flag, path))
    ]
    for why in problems:
        print(f"soaktop: {why}", file=sys.stderr)
    return bool(problems)


def write_outputs(ns: argparse.Namespace, run_dir: Path | None, rc: int) -> int:
    """Write the outputs asked for from the run's record; the run's exit code, or 5 when
    one could not be written (the CI job must not read a missing report as a pass)."""
    asked = {flag: getattr(ns, dest, None) for flag, (dest, _) in _FLAGS.items()}
    if run_dir is None or not any(asked.values()):
        return rc
    if not (run_dir / "record.json").exists():
        detached = rc in (EXIT_DETACHED_OPERATOR, EXIT_DETACHED_SIGNAL)
        for flag, path in asked.items():
            if path is not None:
                cmd = (
                    f"soaktop {'junit' if flag == '--junit' else 'summary-md'} {run_dir} -o {path}"
                )
                words = (
                    f"the run has no record yet (it goes on); once it ends: {cmd}"
                    if detached
                    else f"the run ended without a record; soaktop recover {run_dir}, then {cmd}"
                )
                print(f"soaktop: {flag}: {words}", file=sys.stderr)
        return rc
    failed = False
    for flag, path in asked.items():
        if path is not None and (why := _write(flag, run_dir, path)) is not None:
            print(f"soaktop: {why}", file=sys.stderr)
            failed = True
    return EXIT_STORAGE if failed and rc == 0 else rc


def _write(flag: str, run_dir: Path, path: Path) -> str | None:
    """Write one output; why it could not be (None: written)."""
    from soak.after.run_view import NotARunDir, read_run

    try:
        view = read_run(run_dir)
    except NotARunDir as e:
        return f"{flag}: {e}"
    if view.record is None:
        return f"{flag}: {run_dir}: no readable record ({view.status})"
    try:
        if flag == "--junit":
            from soak.outputs.junit import write_junit

            write_junit(view.record, path)
        else:
            from soak.outputs.summary_md import append_summary

            append_summary(view, path)
    except OSError as e:
        return f"{flag} {safe_line(path)}: not written: {e.strerror or e}"
    return None


def _view_or_none(cmd: str, run_dir: Path) -> RunView | None:
    """The run directory read, when it has a record to write from; else None, said why."""
    from soak.after.run_view import NotARunDir, read_run

    try:
        view = read_run(run_dir)
    except NotARunDir as e:
        print(f"soaktop {cmd}: {e}", file=sys.stderr)
        return None
    if view.record is None:
        print(
            f"soaktop {cmd}: {run_dir}: no readable record ({view.status}); a run that goes "
            f"on: wait for its end; a runner that died: soaktop recover {run_dir}",
            file=sys.stderr,
        )
        return None
    return view


def cmd_junit(ns: argparse.Namespace) -> int:
    """``soaktop junit RUN_DIR [-o FILE]``: 0 written, 2 no record to write it from (or a
    FILE that cannot be), 5 the write failed."""
    from soak.outputs.junit import junit_xml, write_junit

    if (view := _view_or_none("junit", ns.run_dir)) is None or view.record is None:
        return EXIT_USAGE
    if ns.output is None:
        sys.stdout.buffer.write(junit_xml(view.record))
        return 0
    if (why := path_problem("-o", ns.output)) is not None:
        print(f"soaktop junit: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        write_junit(view.record, ns.output)
    except OSError as e:  # a full disk: said, and not 0 (a CI job must not read it as a pass)
        why = f"-o {safe_line(ns.output)}: not written: {e.strerror or e}"
        print(f"soaktop junit: {why}", file=sys.stderr)
        return EXIT_STORAGE
    return 0


def cmd_summary_md(ns: argparse.Namespace) -> int:
    """``soaktop summary-md RUN_DIR [-o FILE]``: 0 written, 2 no record to write it from
    (or a FILE that cannot be), 5 the write failed."""
    from soak.outputs.summary_md import append_summary, summary_markdown

    if (view := _view_or_none("summary-md", ns.run_dir)) is None or view.record is None:
        return EXIT_USAGE
    if ns.output is None:
        sys.stdout.write(summary_markdown(view))
        return 0
    if (why := path_problem("-o", ns.output)) is not None:
        print(f"soaktop summary-md: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        append_summary(view, ns.output)
    except OSError as e:
        why = f"-o {safe_line(ns.output)}: not written: {e.strerror or e}"
        print(f"soaktop summary-md: {why}", file=sys.stderr)
        return EXIT_STORAGE
    return 0
