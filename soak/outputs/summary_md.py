"""A run as Markdown for a CI job's step summary (``--summary-md FILE``, ``soaktop
summary-md RUN_DIR``): the verdict first, its reasons, then the seed-000 table
(:func:`soak.after.compare.compare`, one column) and what is listed under it.

Every cell and line can quote a server (a reason carries an HTTP 500's words, a model id
is the server's): each goes through :func:`soak.safe_text.safe_line` (controls and
invisibles shown as escapes, one line), and what Markdown or the HTML a summary renders
to would read as markup is escaped: ``|`` (a cell boundary), ``\\``, ``<``, ``>``, ``&``,
the emphasis and code marks, brackets. A reason's text is cut at
:data:`REASON_CHARS` and at most :data:`REASONS_SHOWN` are listed (a step summary is
capped at 1 MiB; the record holds them all).
"""

from __future__ import annotations

import re
from pathlib import Path

from soak.after.compare import compare, under_table, verdict_words
from soak.after.run_view import RunView
from soak.safe_text import safe_line

REASON_CHARS = 500
REASONS_SHOWN = 20
_MARKUP = re.compile(r"([\\`*_\[\]|#~])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(value: object) -> str:
    """``value`` as one line of Markdown that shows as the text it is (see the module
    docstring): safe for a table cell too."""
    s = _MARKUP.sub(r"\\\1", safe_line(value))
    return "".join(_HTML.get(c, c) for c in s) if any(c in s for c in _HTML) else s


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _head(view: RunView) -> list[str]:
    rec = view.record
    status = view.label if rec is not None else view.status
    lines = [f"## soaktop: {md_text(status)} — {md_text(verdict_words(view))}", ""]
    lines.append(f"Run {md_text(view.run_id)}")
    if rec is None:
        return lines
    lines[-1] += f", exit code {rec.exit_code}"
    shown = sorted(rec.reasons, key=lambda r: r.effect == "note")  # verdicts first, notes after
    if shown:
        lines.append("")
    for r in shown[:REASONS_SHOWN]:
        lines.append(
            f"- **{md_text(r.effect)}** {md_text(r.code)}: {md_text(_cut(r.message, REASON_CHARS))}"
        )
    if len(shown) > REASONS_SHOWN:
        lines.append(f"- … and {len(shown) - REASONS_SHOWN} more (record.json)")
    return lines


def summary_markdown(view: RunView) -> str:
    """The run's step summary: verdict and reasons, the seed-000 table, what is under it."""
    cmp = compare([view])
    lines = [*_head(view), ""]
    lines.append("| " + " | ".join(md_text(h) for h in cmp.header) + " |")
    lines.append("|" + "---|" * len(cmp.header))
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in cmp.rows]
    for heading, items in under_table(cmp):
        lines += ["", f"{md_text(heading)}:", *(f"- {md_text(i)}" for i in items)]
    lines += ["", *(f"- record: {md_text(p)}" for p in view.problems)] if view.problems else []
    return "\n".join(lines) + "\n"


def append_summary(view: RunView, path: Path) -> None:
    """Append the summary to ``path`` (created if missing): GitHub's
    ``$GITHUB_STEP_SUMMARY`` is one file per step that each writer appends to."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(summary_markdown(view))
