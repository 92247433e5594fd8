"""Which server each arm of ``soaktop decide`` measured: the restoration check and the
candidate's recipe changes.

Seed 004's decision rests on "Original configuration restored: identity checks …
passed". The restored arm is a control of the original only when it *is* the original:
:func:`restoration` runs :func:`soak.after.restoration.check_restoration` on the before
and the restored run, and :func:`refusals` turns each mismatch into a named refusal
(``the restored run is not the original: engine version: original version 0.32.0,
restored version 0.33.0``) — unless the operator allowed the drift, when
:func:`promotion_block` says why no win can be attributed to the candidate. The
candidate's own recipe is compared with the original's the same way
(:func:`candidate_changes`): what it changed is shown beside the decision, and a candidate
that changed nothing either server states or the operator declared is a caveat.
"""

from __future__ import annotations

from soak.after.decide_model import Caveat, Restoration
from soak.after.restoration import check_restoration
from soak.record.models import RunRecord
from soak.record.recipe import differing_facts, fact_words, recipe_facts

DRIFT_HINT = "--allow-restoration-drift decides anyway, and then never promotes"


def restoration(before: RunRecord, restored: RunRecord, allow_drift: bool) -> Restoration:
    """The restored run checked against the before run (the original), in the words the
    reports print."""
    check = check_restoration(before, restored)
    not_checked = f"; not checked: {'; '.join(check.unchecked)}" if check.unchecked else ""
    if check.mismatches:
        summary = (
            "Original configuration NOT restored"
            + (" (decided anyway: --allow-restoration-drift)" if allow_drift else "")
            + f": {'; '.join(check.mismatches)}"
            + (f"; matched: {', '.join(check.checked_words)}" if check.checked_words else "")
            + not_checked
        )
    elif not check.checked:
        summary = f"Original configuration not checked: {'; '.join(check.unchecked)}"
    else:
        summary = (
            "Original configuration restored: identity checks passed "
            f"({', '.join(check.checked_words)}){not_checked}"
        )
    return Restoration(
        matched=check.matched,
        checked=check.checked,
        mismatches=check.mismatches,
        unchecked=check.unchecked,
        allowed_drift=allow_drift,
        summary=summary,
    )


def refusals(rest: Restoration) -> list[str]:
    """One :class:`~soak.after.decide_model.NotComparable` problem per mismatch (none when
    the restored run matched or the drift was allowed); the last says how to decide
    anyway."""
    if rest.matched or rest.allowed_drift:
        return []
    out = [f"the restored run is not the original: {m}" for m in rest.mismatches]
    out[-1] += f" ({DRIFT_HINT})"
    return out


def promotion_block(rest: Restoration) -> str | None:
    """Why no win can be attributed to the candidate, whatever its cells: a restored run
    that drifted from the original (allowed, not refused), or one that could not be
    checked at all; None when the restoration check passed."""
    if rest.mismatches:
        return (
            f"restoration drifted: {'; '.join(rest.mismatches)}, so no win can be "
            "attributed to the candidate"
        )
    if not rest.checked:
        return (
            f"the restored run could not be checked against the original "
            f"({'; '.join(rest.unchecked)}), so no win can be attributed to the candidate"
        )
    return None


def candidate_changes(before: RunRecord, candidate: RunRecord) -> list[str]:
    """What the candidate changed against the original: ``64 slots/replica (original 32
    slots/replica)``, one item per served model or recipe fact that differs."""
    out = []
    a, b = before.identity, candidate.identity
    if a is not None and b is not None and a.model != b.model:
        out.append(f"model {b.model} (original {a.model})")
    fa, fc = recipe_facts(a), recipe_facts(b)
    for key in differing_facts([fa, fc]):
        va, vc = fa.get(key), fc.get(key)
        if va is None:
            assert vc is not None  # the key came from one of the two
            out.append(f"{fact_words(key, vc)} (the original states none)")
        elif vc is None:
            out.append(f"none stated (original {fact_words(key, va)})")
        else:
            out.append(f"{fact_words(key, vc)} (original {fact_words(key, va)})")
    return out


def identity_caveats(
    before: RunRecord, candidate: RunRecord, rest: Restoration, changes: list[str]
) -> list[Caveat]:
    """The caveats of which server each arm measured: an allowed restoration drift, a
    restoration that could not be checked, a candidate whose recipe reads the same."""
    out: list[Caveat] = []
    if rest.mismatches:
        out.append(
            Caveat(
                code="restoration_drift",
                message="the restored run is not the original (--allow-restoration-drift): "
                f"{'; '.join(rest.mismatches)} — the controls measured different servers, "
                "so no win can be attributed to the candidate and it is not promoted",
            )
        )
    elif not rest.checked:
        out.append(
            Caveat(
                code="restoration_unchecked",
                message="the restored run could not be checked against the original: "
                f"{'; '.join(rest.unchecked)} — it is not promoted",
            )
        )
    same = recipe_facts(before.identity)
    if not changes and same and recipe_facts(candidate.identity):
        shown = ", ".join(fact_words(k, v) for k, v in same.items())
        out.append(
            Caveat(
                code="candidate_identical_recipe",
                message="the candidate changed nothing the servers state or the operator "
                f"declared ({shown}): check that the switch took effect, and declare what "
                "changed (--recipe key=value)",
            )
        )
    return out
