"""The reading subcommands: ``soaktop compare``, ``soaktop runs`` and ``soaktop report``.

:func:`add_parsers` registers them on the main parser's subparsers, each with
``set_defaults(handler=...)``; a handler takes the parsed namespace and returns the exit
code: 0, or 2 (``EXIT_USAGE``) when a path is not what the command needs (named in the
message). None of them starts a run or writes to a run directory except ``report``,
which writes ``RUN/report.html`` unless ``--html`` says where; ``compare --html FILE`` and
``--markdown FILE``, and ``runs --csv FILE`` (atomically), write only the FILE given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from soak.record.models import EXIT_USAGE
from soak.safe_text import safe_json, safe_text


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``compare``, ``runs`` and ``report``."""
    cmp = sub.add_parser(
        "compare",
        help="finished runs side by side (the seed-000 table)",
        description="One column per run, headed by the run's name and the recipe facts it "
        "differs in: configuration, completed requests, load failures, elapsed incl. drain, "
        "output tok/s, P99 TTFT/E2E, drift first → last (records with a window series), "
        "gates before/after, verdict; under it every other difference and each run's "
        "caveats, then each run's drift and leak table. INVALID and ABORTED runs keep their "
        "own flagged columns.",
    )
    cmp.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories")
    cmp.add_argument("--json", action="store_true", help="print JSON instead of the table")
    cmp.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the table as Markdown ('-': stdout)",
    )
    cmp.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML page (the table and bar charts per run)",
    )
    cmp.set_defaults(handler=cmd_compare)

    runs = sub.add_parser("runs", help="list the run directories in a folder, newest first")
    runs.add_argument(
        "dir", nargs="?", type=Path, default=Path("runs"), metavar="DIR", help="default ./runs"
    )
    runs.add_argument("--json", action="store_true", help="one JSON object per run")
    runs.add_argument(
        "--csv",
        type=Path,
        metavar="FILE",
        help="also write the results CSV: one row per run, summary.csv's columns with "
        "status labels, the recipe and the directory ('-': stdout instead of the table)",
    )
    runs.set_defaults(handler=cmd_runs)

    rep = sub.add_parser(
        "report",
        help="write a self-contained HTML report of one run",
        description="Charts over time, the window series over the whole run with its drift "
        "and leak table, then the record's tables; one self-contained page.",
    )
    rep.add_argument("run_dir", type=Path, metavar="RUN")
    rep.add_argument(
        "--html", type=Path, metavar="FILE", help="where to write it (default RUN/report.html)"
    )
    rep.set_defaults(handler=cmd_report)


def _usage(cmd: str, message: str) -> int:
    print(f"soaktop {cmd}: {safe_text(message)}", file=sys.stderr)
    return EXIT_USAGE


def cmd_compare(ns: argparse.Namespace) -> int:
    """``soaktop compare RUN RUN ...``."""
    from soak.after.compare import (
        NotARunDir,
        compare,
        comparison_json,
        read_run,
        render_markdown,
        render_text,
    )
    from soak.record.run_dir import RunDirError, check_run_dir, unreadable_record

    try:
        for p in ns.runs:
            check_run_dir(p)
        views = [read_run(p) for p in ns.runs]
    except (NotARunDir, RunDirError) as e:
        return _usage("compare", str(e))
    damaged = [why for v in views if (why := unreadable_record(v.path)) is not None]
    if damaged:  # a column of nothing would read as a run that measured nothing
        for why in damaged[1:]:
            print(f"soaktop compare: {safe_text(why)}", file=sys.stderr)
        return _usage("compare", damaged[0])
    table = compare(views)
    html = getattr(ns, "html", None)
    if html is not None:
        from soak.after.report import ReportError
        from soak.after.report.bars import write_page
        from soak.after.report.compare_page import build_compare_page

        try:
            write_page(html, build_compare_page(table))
        except ReportError as e:
            return _usage("compare", str(e))
        except OSError as e:
            return _usage("compare", f"cannot write {html}: {e.strerror or e}")
        print(f"soaktop compare: wrote {html}", file=sys.stderr)
    md = render_markdown(table) if ns.markdown is not None else None
    if md is not None and str(ns.markdown) == "-":  # render_markdown made its cells safe
        print(md, end="")
        return 0
    if ns.json:
        print(safe_json(orjson.dumps(comparison_json(table), option=orjson.OPT_INDENT_2).decode()))
    else:
        print(render_text(table), end="")
    if md is not None:
        try:
            ns.markdown.write_text(md, encoding="utf-8")
        except OSError as e:
            return _usage("compare", f"cannot write {ns.markdown}: {e.strerror or e}")
        print(f"soaktop compare: wrote {ns.markdown}", file=sys.stderr)
    return 0


def cmd_runs(ns: argparse.Namespace) -> int:
    """``soaktop runs [DIR]``."""
    from soak.after.compare import RunView, is_run_dir, list_runs, read_run, render_runs, run_line
    from soak.record.run_dir import unreadable_record

    if not ns.dir.exists():
        return _usage("runs", f"{ns.dir} is not a directory (it does not exist)")
    if not ns.dir.is_dir():
        return _usage("runs", f"{ns.dir} is not a directory")
    # Given one run directory rather than the folder of runs: show that run.
    views = [read_run(ns.dir)] if is_run_dir(ns.dir) else list_runs(ns.dir)
    # A damaged record is listed as such (its reason: what is damaged), never read on.
    views = [
        RunView(
            v.path,
            v.path.name,
            "unreadable",
            problems=[why.removeprefix(f"{v.path}/")],  # the row names the run already
            started=v.started,
        )
        if (why := unreadable_record(v.path)) is not None
        else v
        for v in views
    ]
    csv_path = getattr(ns, "csv", None)
    if csv_path is not None:
        from soak.after.runs_csv import runs_csv
        from soak.record.models import write_atomic

        data = runs_csv(views)  # every cell through safe_csv_cell
        if str(csv_path) == "-":
            sys.stdout.write(data.decode())
            return 0
        try:
            write_atomic(csv_path, data)
        except OSError as e:
            return _usage("runs", f"cannot write {csv_path}: {e.strerror or e}")
        print(f"soaktop runs: wrote {csv_path} ({len(views)} runs)", file=sys.stderr)
    if ns.json:
        for v in views:
            print(safe_json(orjson.dumps(run_line(v)).decode()))
        return 0
    if not views:
        print(f"no run directories in {ns.dir}")
        return 0
    print(render_runs(views, width=_terminal_width()), end="")
    return 0


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((160, 24)).columns


def cmd_report(ns: argparse.Namespace) -> int:
    """``soaktop report RUN [--html FILE]``."""
    from soak.after.compare import NotARunDir
    from soak.after.report import ReportError, write_report
    from soak.record.run_dir import RunDirError, check_run_dir, unreadable_record

    try:
        check_run_dir(ns.run_dir)
    except RunDirError as e:
        return _usage("report", str(e))
    if (why := unreadable_record(ns.run_dir)) is not None:
        return _usage("report", why)
    try:
        path = write_report(ns.run_dir, ns.html)
    except NotARunDir as e:
        return _usage("report", str(e))
    except ReportError as e:
        return _usage("report", str(e))
    except OSError as e:
        return _usage("report", f"cannot write the report: {e}")
    size = path.stat().st_size / 2**20
    print(f"soaktop report: wrote {path} ({size:.1f} MB, self-contained; open it in a browser)")
    return 0
