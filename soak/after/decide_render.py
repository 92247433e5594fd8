"""The text and markdown of a ``soaktop decide`` result: the seed-004 tables.

Kept apart from the rule (``soak.after.decide``): this module only lays out a ``Decision``.
Run ids, model names, labels and reasons come from records (and so from servers): every
cell and line is made display-safe (:mod:`soak.safe_text`) before it is laid out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from soak.after.decide_model import (
    ROLE_TITLES,
    ROLES,
    ArmSummary,
    CellDecision,
    Decision,
    fmt_gain,
)
from soak.safe_text import safe_line


def _table(headers: Sequence[str], rows: list[list[str]], markdown: bool) -> list[str]:
    rows = [[safe_line(v) for v in r] for r in rows]  # escaped before the widths are taken
    if markdown:
        rows = [[v.replace("|", "\\|") for v in r] for r in rows]
        return [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    return [
        "  " + "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in (list(headers), *rows)
    ]


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _input_head(d: Decision) -> str:
    return (
        "Input"
        if any(c.label.split("/C")[0].endswith(" target") for c in d.cells)
        else ("Actual input")
    )


def _cell_head(c: CellDecision) -> list[str]:
    return [c.label.split("/C")[0], str(c.concurrency)]


def _candidate_title(d: Decision) -> str:
    label = d.arm("candidate").label
    return f"Candidate ({label})" if label else "Candidate"


def render(d: Decision, markdown: bool = False) -> str:
    """The seed-004-style report: plain aligned tables, or markdown (``markdown=True``)."""
    h = (lambda t: f"## {t}") if markdown else (lambda t: t)
    title = f"{d.decision} — {d.wins}/{d.cells_total} material wins"
    lines = [f"# Decision: {title}" if markdown else f"soaktop decide: {title}", ""]
    lines += [f"**{d.card}**" if markdown else d.card, "", d.rule, ""]
    lines += restoration_lines(d, h)
    lines += _runs_section(d, h, markdown)
    lines += _cells_sections(d, h, markdown)
    lines += ["", h(f"Decision: {d.decision}"), ""]
    lines += [f"- {r}" for r in d.reasons]
    lines += ["", h("Caveats"), ""]
    lines += [f"- {c.message} [{c.code}]" for c in d.caveats] or ["- none detected"]
    if d.run_caveats:
        lines += ["", h("What the runs cannot show"), ""]
        lines += [f"- {c.message} [{c.code}]" for c in d.run_caveats]
    lines += _engine_section(d, h, markdown)
    return "\n".join(safe_line(ln) for ln in lines) + "\n"


def restoration_lines(d: Decision, h: Callable[[str], str]) -> list[str]:
    """Which servers the arms measured: the restoration check in seed 004's words, what
    it could not check, and what the candidate changed against the original."""
    rest = d.restoration
    lines = [h("Restoration and recipe"), "", f"- {rest.summary}"]
    if d.promotion_blocked:
        lines.append(f"- Promotion blocked: {d.promotion_blocked}")
    lines.append(
        "- Candidate against the original: "
        + ("; ".join(d.candidate_changes) or "no stated or declared recipe fact differs")
    )
    return [*lines, ""]


def _runs_section(d: Decision, h: Callable[[str], str], markdown: bool) -> list[str]:
    """The three runs, and the timed requests they completed."""
    lines = [h("Runs"), ""]
    lines += _table(
        ["Arm", "Run", "Status", "Model", "Timed requests completed"],
        [
            [
                ROLE_TITLES[a.role] if a.role != "candidate" else _candidate_title(d),
                a.run_id,
                a.status,
                a.model or "—",
                f"{a.completed}/{a.completed + a.failed}",
            ]
            for a in d.arms
        ],
        markdown,
    )
    total_failed = sum(a.failed for a in d.arms)
    lines += [
        "",
        f"Timed requests completed: {sum(a.completed for a in d.arms)}/"
        f"{sum(a.completed + a.failed for a in d.arms)} — "
        + ", ".join(f"{a.completed} {a.role}" for a in d.arms)
        + ("; no request failures" if not total_failed else f"; {total_failed} failed"),
        "",
    ]
    return lines


def _cells_sections(d: Decision, h: Callable[[str], str], markdown: bool) -> list[str]:
    """Per cell: the decision statistic, the change against each control and verdict, and
    the nearest-rank p50 shown for reference."""
    arm_heads = ["Original before", _candidate_title(d), "Original restored"]
    lines = [
        h("Median end-to-end seconds"),
        "",
        "Ordinary median of every repetition's timed requests, pooled per cell; lower is "
        "better. This is the decision statistic.",
        "",
    ]
    lines += _table(
        [_input_head(d), "Concurrency", *arm_heads],
        [[*_cell_head(c), *(_s(getattr(c, r).e2e_median_s) for r in ROLES)] for c in d.cells],
        markdown,
    )
    lines += ["", h("Change against each control"), ""]
    lines += _table(
        [_input_head(d), "Concurrency", "vs before", "vs restored", "Controls apart", "Verdict"],
        [
            [
                *_cell_head(c),
                fmt_gain(c.gain_vs_before_pct),
                fmt_gain(c.gain_vs_restored_pct),
                "n/a" if c.controls_apart_pct is None else f"{c.controls_apart_pct:.2f}%",
                c.verdict,
            ]
            for c in d.cells
        ],
        markdown,
    )
    lines += [
        "",
        h("Nearest-rank p50 seconds"),
        "",
        "An observed value of the same pooled requests — a different aggregation from the "
        "median above, shown for reference, not decided on.",
        "",
    ]
    return lines + _table(
        [_input_head(d), "Concurrency", *arm_heads, "Requests (b/c/r)"],
        [
            [
                *_cell_head(c),
                *(_s(getattr(c, r).e2e_p50_nearest_s) for r in ROLES),
                "/".join(str(getattr(c, r).requests) for r in ROLES),
            ]
            for c in d.cells
        ],
        markdown,
    )


def _engine_section(d: Decision, h: Callable[[str], str], markdown: bool) -> list[str]:
    """Engine-reported facts, beside the decision."""
    lines = [
        "",
        h("Engine facts"),
        "",
        "Engine-reported; beside the decision, not part of it.",
        "",
    ]
    if d.engine.token_slots_vs_before:
        lines.append(f"Token slots, before → candidate: {d.engine.token_slots_vs_before}")
    if d.engine.token_slots_vs_restored:
        lines.append(f"Token slots, restored → candidate: {d.engine.token_slots_vs_restored}")
    if d.engine.token_slots_vs_before or d.engine.token_slots_vs_restored:
        lines.append("")
    arm_heads = ["Original before", _candidate_title(d), "Original restored"]
    return lines + _table(["Fact", *arm_heads], engine_rows(d), markdown)


def engine_rows(d: Decision) -> list[list[str]]:
    """The engine facts per arm (token slots, spec decode, sampled occupancy, free GPU
    memory): one row each, for the text, markdown and HTML reports alike."""
    rows = [
        [
            "Token slots",
            *(
                "—"
                if a.token_slots is None
                else f"{a.token_slots:,}"
                + (" (some endpoints unknown)" if a.token_slots_partial else "")
                for a in d.arms
            ),
        ],
    ]
    if d.engine.spec_decode:
        rows.append(["Spec-decode acceptance", *(spec_decode_words(a) for a in d.arms)])
    rows.append(
        [
            "Max sampled running",
            *("—" if a.max_running is None else f"{a.max_running:g}" for a in d.arms),
        ]
    )
    rows.append(
        [
            "Min free GPU MiB",
            *("—" if a.min_free_mib is None else f"{a.min_free_mib:,.0f}" for a in d.arms),
        ]
    )
    return rows


def spec_decode_words(a: ArmSummary) -> str:
    """Spec-decode acceptance of one arm in words (— without speculative decoding)."""
    if a.spec_decode_acceptance_rate is None:
        return "—"
    text = f"{100 * a.spec_decode_acceptance_rate:.1f}%"
    if a.spec_decode_mean_acceptance_length is not None:
        text += f" (mean length {a.spec_decode_mean_acceptance_length:.2f})"
    return text
