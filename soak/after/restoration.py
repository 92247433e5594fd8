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
- the GPU set (name and UUID of each GPU, when both runs had GPU identity).

A fact only one run's server stated (an optional endpoint that did not answer in time)
is not compared but said; a fact only one run *declared* is a difference. The check
says what it checked, what differed and what it could not check, in words a
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
    checked_words: list[str] = field(default_factory=list)
    """The same matches as a column header reads them (``version 0.32.0``, ``32
    slots/replica``): seed 004's "identity checks passed (…)" list."""
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


def _declared(key: str, *idents: Identity) -> bool:
    """The operator's fact (``--recipe``, ``[recipe]``, ``--server-cmd-file``), not a
    server's: one run declaring what the other does not is a difference in the recipe."""
    if key == "server_cmd_sha256" or key.endswith(" (declared)"):
        return True
    return any(key in i.recipe.declared for i in idents)


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
    _compare(out, "model", a.model, b.model, names, f"model {a.model}")
    n_eps, eps_words = len(a.endpoints), f"{len(a.endpoints)} endpoint"
    eps_words += "s" if n_eps != 1 else ""
    _compare(out, "endpoints", str(n_eps), str(len(b.endpoints)), names, eps_words)
    fa, fb = recipe_facts(a), recipe_facts(b)
    for key in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(key), fb.get(key)
        title = fact_title(key)
        if va is None or vb is None:
            stated_by, lacking = (b_name, a_name) if va is None else (a_name, b_name)
            value = vb if va is None else va
            assert value is not None  # the key came from one of the two
            said = f"{title}: {fact_words(key, value)} in the {stated_by} run only"
            if _declared(key, a, b):
                out.mismatches.append(f"{said} (declared; the {lacking} run declares none)")
            else:
                # A server that did not answer an optional endpoint this time (a busy
                # /server_info) is no evidence of another recipe: said, not held against it.
                out.unchecked.append(f"{said} (the {lacking} run's server did not state it)")
        elif va != vb:
            out.mismatches.append(
                f"{title}: {a_name} {fact_words(key, va)}, {b_name} {fact_words(key, vb)}"
            )
        else:
            out.checked.append(f"{title}: {fact_words(key, va)}")
            out.checked_words.append(fact_words(key, va))
    ga, gb = _gpu_set(a), _gpu_set(b)
    if ga and gb:
        _compare(out, "GPU set", ", ".join(ga), ", ".join(gb), names, f"GPUs {', '.join(ga)}")
    else:
        no_gpus = [n for n, g in ((a_name, ga), (b_name, gb)) if not g]
        out.unchecked.append(f"GPU set (no GPU identity in the {' and '.join(no_gpus)} run)")
    return out


def _compare(
    out: RestorationCheck, title: str, va: str, vb: str, names: tuple[str, str], words: str
) -> None:
    if va == vb:
        out.checked.append(f"{title}: {va}")
        out.checked_words.append(words)
    else:
        out.mismatches.append(f"{title}: {names[0]} {va}, {names[1]} {vb}")
