"""Is the restored arm the original? The identity and recipe check of an A/B/A.

Seed 004's decision rests on "Original configuration restored: identity checks …
passed" — "the original identity/recipe/image/endpoint/GPU bindings matched". A restored
run on another engine version, another checkpoint or with another KV pool is not a
control of the original, however close its latencies: :func:`check_restoration` compares
the two records on

- the served model (name and the root the server loaded),
- every recipe fact either run stated or declared (:func:`soak.record.recipe.recipe_facts`:
  engine, version, slots per replica, GPU memory target, KV token slots, precision,
  parallel sizes, speculative config, the operator's declared facts, the launch command's
  hash),
- the number of endpoints, and
- the GPU set (name and UUID of each GPU, when both runs had GPU identity),

and says what it checked, what differed and what it could not check, in words a
reviewer can sign ("checked: version 0.32.0, 32 slots/replica, …").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from soak.record.models import Identity, RunRecord
from soak.record.recipe import fact_title, fact_words, recipe_facts


@dataclass
class RestorationCheck:
    """What :func:`check_restoration` found."""

    checked: list[str] = field(default_factory=list)
    """What matched, one item per fact: ``engine version: 0.32.0``."""
    mismatches: list[str] = field(default_factory=list)
    """What differs: ``KV cache token slots per replica: original 262,144 KV tokens,
    restored 320,000 KV tokens``."""
    unchecked: list[str] = field(default_factory=list)
    """What could not be compared (no identity, no GPU identity in one run, …)."""

    @property
    def matched(self) -> bool:
        """Nothing differed (what could not be checked is said, not held against it)."""
        return not self.mismatches

    def summary(self) -> str:
        """One sentence: ``Original configuration restored: identity checks passed (…)``."""
        if self.mismatches:
            return "Original configuration NOT restored: " + "; ".join(self.mismatches)
        head = f"Original configuration restored: {len(self.checked)} identity checks passed"
        tail = f"; not checked: {'; '.join(self.unchecked)}" if self.unchecked else ""
        return f"{head} ({'; '.join(self.checked)}){tail}"


def _gpu_set(ident: Identity) -> list[str]:
    return sorted(f"{g.name or '?'} {g.uuid or g.index}" for g in ident.gpus)


def check_restoration(
    original: RunRecord, restored: RunRecord, *, names: tuple[str, str] = ("original", "restored")
) -> RestorationCheck:
    """Compare the restored run's identity and recipe with the original's."""
    out = RestorationCheck()
    a_name, b_name = names
    a, b = original.identity, restored.identity
    missing = [n for n, i in ((a_name, a), (b_name, b)) if i is None]
    if a is None or b is None:
        out.unchecked.append(
            f"no identity in the {' and '.join(missing)} run: nothing about the server "
            "could be compared"
        )
        return out
    _compare(out, "model", a.model, b.model, names)
    _compare(out, "endpoints", str(len(a.endpoints)), str(len(b.endpoints)), names)
    fa, fb = recipe_facts(a), recipe_facts(b)
    for key in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(key), fb.get(key)
        title = fact_title(key)
        if va is None or vb is None:
            stated_by, lacking = (b_name, a_name) if va is None else (a_name, b_name)
            value = vb if va is None else va
            assert value is not None  # the key came from one of the two
            out.mismatches.append(
                f"{title}: stated or declared in the {stated_by} run only "
                f"({fact_words(key, value)}; the {lacking} run has none)"
            )
        elif va != vb:
            out.mismatches.append(
                f"{title}: {a_name} {fact_words(key, va)}, {b_name} {fact_words(key, vb)}"
            )
        else:
            out.checked.append(f"{title}: {fact_words(key, va)}")
    ga, gb = _gpu_set(a), _gpu_set(b)
    if ga and gb:
        _compare(out, "GPU set", ", ".join(ga), ", ".join(gb), names)
    else:
        no_gpus = [n for n, g in ((a_name, ga), (b_name, gb)) if not g]
        out.unchecked.append(f"GPU set (no GPU identity in the {' and '.join(no_gpus)} run)")
    return out


def _compare(out: RestorationCheck, title: str, va: str, vb: str, names: tuple[str, str]) -> None:
    if va == vb:
        out.checked.append(f"{title}: {va}")
    else:
        out.mismatches.append(f"{title}: {names[0]} {va}, {names[1]} {vb}")
