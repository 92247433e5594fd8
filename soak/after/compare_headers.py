"""What ``soaktop compare`` says about how the runs differ: column headers from the
recipe, the other differences under the table, and each run's caveats.

Seed 000's header is the difference between two serving recipes — ``Baseline · 32
slots/replica · 95% allocation`` vs ``DSpark K3 · 64 slots/replica · 90% allocation`` —
and its text says why that matters ("They were not otherwise identical"). A column's
header is therefore the run's name (its ``--label`` when the runs' labels differ, else
its run id) followed by the words of at most :data:`HEADER_FACTS` facts that differ:
the recipe facts (:func:`soak.record.recipe.recipe_facts`), client concurrency and the
replica count, the facts of :data:`HEADER_FIRST` first. Nothing is dropped: every other
difference — recipe facts beyond those, config keys — is listed under the table, and
runs whose recipes are identical say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from soak.after.record_view import config_value
from soak.after.run_view import RunView
from soak.record.models import Identity
from soak.record.recipe import STATED_KEYS, differing_facts, fact_title, fact_words, recipe_facts
from soak.record.sections import RecordCaveat

HEADER_FIRST = ("max_num_seqs", "gpu_memory_utilization", "token_slots", "speculative")
"""The facts a header names first when they differ: what decides admission capacity."""
HEADER_FACTS = 3
"""At most this many facts in a header (the rest are listed under the table)."""
HEADLINE_KEYS = (
    "engine",
    "version",
    "max_num_seqs",
    "gpu_memory_utilization",
    "token_slots",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "quantization",
    "kv_cache_dtype",
    "speculative",
)
"""The facts a one-line recipe headline names (``soaktop runs --csv``, "same recipe")."""
RUN_FACTS = {"concurrency": "client concurrency", "replicas": "replicas (endpoints)"}
"""The run's own facts a header may name beside the recipe's."""


@dataclass
class Difference:
    """One fact the runs differ in: its key, what it is, and one value per run."""

    key: str
    title: str
    values: list[str | None]
    """One per run, in the runs' order (None: the run does not state it)."""
    words: list[str]
    """How each run's value reads in a header (``32 slots/replica``)."""

    def text(self, names: Sequence[str]) -> str:
        """``sequences one replica runs at once (max_num_seqs): base 32 / cand 64``."""
        vals = " / ".join(
            f"{n} {'—' if v is None else v}" for n, v in zip(names, self.values, strict=True)
        )
        return f"{self.title}: {vals}"

    def json(self, names: Sequence[str]) -> dict[str, Any]:
        """The difference as ``--json`` carries it."""
        return {
            "key": self.key,
            "title": self.title,
            "values": self.values,
            "text": self.text(names),
        }


@dataclass
class Headers:
    """Each run's column header and what the header leaves to the lines under the table."""

    names: list[str]
    """Each run's name: its label when the runs' labels differ, else its run id."""
    by_label: bool
    """True when the names are labels (the table then has a "Run" row of run ids)."""
    headers: list[str]
    in_header: list[Difference]
    others: list[Difference]
    """Every difference the headers do not name: recipe facts, then config keys."""
    same_recipe: str | None
    """``vllm · version 0.32.0 · … (12 facts)`` when every run's recipe is the same (shown
    as "Same recipe: …"); None when they differ or a run has no record."""
    facts: list[dict[str, str]]
    """Each run's recipe facts."""

    def json(self) -> dict[str, Any]:
        """``headers``, ``other_differences`` and ``same_recipe`` as ``--json`` carries them."""
        return {
            "headers": [
                {
                    "name": n,
                    "header": h,
                    "facts": [{"key": d.key, "value": d.values[i]} for d in self.in_header],
                    "recipe": self.facts[i],
                }
                for i, (n, h) in enumerate(zip(self.names, self.headers, strict=True))
            ],
            "other_differences": [d.json(self.names) for d in self.others],
            "same_recipe": self.same_recipe,
        }


def run_names(views: Sequence[RunView]) -> tuple[list[str], bool]:
    """Each run's ``--label`` when there are several runs and their labels all differ;
    their run ids otherwise (two runs labelled alike must not read as one)."""
    labels = [
        str(config_value(v.record, "label") or "") if v.record is not None else "" for v in views
    ]
    if len(views) > 1 and all(labels) and len(set(labels)) == len(labels):
        return labels, True
    return [v.run_id for v in views], False


def _recipe_difference(key: str, facts: list[dict[str, str] | None]) -> Difference:
    values = [f.get(key) if f is not None else None for f in facts]
    title = fact_title(key) + (f" ({key})" if key in STATED_KEYS else "")
    return Difference(key, title, values, [fact_words(key, v or "?") for v in values])


def _run_difference(key: str, values: list[Any]) -> Difference:
    shown = [None if v is None else str(v) for v in values]
    if key == "replicas":
        words = [f"{v or '?'} replica{'' if v == 1 else 's'}" for v in values]
    else:
        words = [f"concurrency {v if v is not None else '?'}" for v in values]
    return Difference(key, RUN_FACTS[key], shown, words)


def build_headers(
    views: Sequence[RunView],
    confs: Sequence[dict[str, Any]],
    config_diffs: dict[str, list[Any]],
    shown_config: frozenset[str] = frozenset(RUN_FACTS),
) -> Headers:
    """The headers of these runs (``confs``: each run's ``compare.configuration``;
    ``config_diffs``: ``compare.config_differences``; keys of ``shown_config`` are not
    listed again as config differences)."""
    names, by_label = run_names(views)
    facts = [recipe_facts(v.record.identity) if v.record is not None else {} for v in views]
    recorded = [f for f, v in zip(facts, views, strict=True) if v.record is not None]
    per_run: list[dict[str, str] | None] = [
        f if v.record is not None else None for f, v in zip(facts, views, strict=True)
    ]
    differing = differing_facts(recorded)
    ranked = [k for k in HEADER_FIRST if k in differing]
    ranked += [
        k
        for k in RUN_FACTS
        if _differs([c[k] for c, v in zip(confs, views, strict=True) if v.record is not None])
    ]
    ranked += [k for k in differing if k not in ranked]
    diffs = [
        _run_difference(k, [c[k] for c in confs])
        if k in RUN_FACTS
        else _recipe_difference(k, per_run)
        for k in ranked
    ]
    in_header, others = diffs[:HEADER_FACTS], diffs[HEADER_FACTS:]
    skip = set(shown_config) | ({"label"} if by_label else set())
    others += [
        Difference(f"config {k}", f"config {k}", [_val(x) for x in vals], [])
        for k, vals in config_diffs.items()
        if k not in skip
    ]
    headers = [" · ".join([name, *(d.words[i] for d in in_header)]) for i, name in enumerate(names)]
    same = None
    if len(recorded) == len(views) > 1 and not differing:
        same = f"{headline(facts[0])} ({len(facts[0])} facts)"
    return Headers(names, by_label, headers, in_header, others, same, facts)


def _differs(values: list[Any]) -> bool:
    return len(values) > 1 and any(v != values[0] for v in values)


def _val(v: Any) -> str | None:
    if isinstance(v, list):
        return ",".join(str(_val(x)) for x in v) or "[]"
    return None if v is None else str(v)


def headline(facts: dict[str, str]) -> str:
    """A recipe in one line: ``vllm · version 0.32.0 · 32 slots/replica · 90% GPU memory ·
    262,144 KV tokens`` (the facts of :data:`HEADLINE_KEYS` it states; ``+N declared``)."""
    parts = [fact_words(k, facts[k]) for k in HEADLINE_KEYS if k in facts]
    declared = [k for k in facts if k not in STATED_KEYS and k != "server_cmd_sha256"]
    if declared:
        parts.append(f"+{len(declared)} declared")
    return " · ".join(parts) or "no recipe facts recorded"


def recipe_headline(identity: Identity | None) -> str:
    """:func:`headline` of a record's identity."""
    return headline(recipe_facts(identity))


# --- caveats -------------------------------------------------------------------------


@dataclass
class Caveats:
    """The runs' record caveats: the ones every run shares, once, and each run's own."""

    shared: list[RecordCaveat]
    own: list[list[RecordCaveat]]
    """One list per run, in the runs' order (a shared caveat is not repeated here)."""

    def lines(self, names: Sequence[str]) -> list[tuple[str, list[str]]]:
        """(heading, messages) per group that has any: ``both runs``, then each run."""
        out: list[tuple[str, list[str]]] = []
        if self.shared:
            who = "both runs" if len(names) == 2 else f"all {len(names)} runs"
            out.append((who, [c.message for c in self.shared]))
        out += [
            (n, [c.message for c in own]) for n, own in zip(names, self.own, strict=True) if own
        ]
        return out

    def json(self, names: Sequence[str]) -> dict[str, Any]:
        """``caveats`` as ``--json`` carries it."""
        return {
            "shared": [c.model_dump(mode="json") for c in self.shared],
            "runs": [
                {"name": n, "caveats": [c.model_dump(mode="json") for c in own]}
                for n, own in zip(names, self.own, strict=True)
            ],
        }


def run_caveats(views: Sequence[RunView]) -> Caveats:
    """Each run's ``record.caveats``; those every run has (same code and words) once."""
    each = [list(v.record.caveats) if v.record is not None else [] for v in views]
    keys = [{(c.code, c.message) for c in cs} for cs in each]
    common = set.intersection(*keys) if len(views) > 1 and keys else set()
    shared = [c for c in (each[0] if each else []) if (c.code, c.message) in common]
    own = [[c for c in cs if (c.code, c.message) not in common] for cs in each]
    return Caveats(shared, own)
