"""What a scout checks about the servers before it spends a run on them.

After each switch the endpoints' identity is probed (:mod:`soak.run.scout_switch`) and
compared with what the first original run's servers said right after *their* switch —
probe against probe, the same questions asked the same way, so a fact one probe can read
and a run's record holds besides (GPU identity from NVML, say) never reads as a
difference here:

- a **restored original** must be the original again: the lead's
  :func:`soak.after.restoration.check_restoration` on the two probed identities, before
  its load. A mismatch stops the scout (``--allow-restoration-drift``: it goes on, and
  ``decide`` caveats it); the GPU set is left to ``decide``, which sees the runs' records;
- a **candidate** whose servers state the same recipe as the original's and that declares
  no different fact may not have been switched at all: a warning, not a stop (a
  candidate can change what no server states).
"""

from __future__ import annotations

from soak import __version__
from soak.after.restoration import RestorationCheck, check_restoration
from soak.record.models import EndpointIdentity, Identity, RunRecord, Status
from soak.record.recipe import Recipe, fact_words, recipe_facts


def probed_identity(
    model: str, endpoints: list[EndpointIdentity], declared: dict[str, str]
) -> Identity:
    """An identity made of one probe of the endpoints and the arm's declared facts."""
    engine = next((e.engine for e in endpoints if e.engine), None)
    return Identity(
        model=model,
        model_served=any(model in {m.id for m in e.models} for e in endpoints),
        engine=engine or "unknown",
        endpoints=endpoints,
        config_sha256="",
        soaktop_version=__version__,
        recipe=Recipe(declared=dict(declared)),
    )


def _as_record(identity: Identity, name: str) -> RunRecord:
    """A record holding only ``identity``: what :func:`check_restoration` compares."""
    return RunRecord(
        run_id=f"probe of the {name}",
        status=Status.PASSED,
        exit_code=0,
        config={},
        identity=identity,
        started_at="",
        ended_at="",
    )


def restoration_before_load(original: Identity, restored: Identity) -> RestorationCheck:
    """Is the server the scout restored the original one? (The GPU set is ``decide``'s:
    a probe does not read it.)"""
    check = check_restoration(_as_record(original, "original"), _as_record(restored, "restored"))
    check.unchecked = [u for u in check.unchecked if not u.startswith("GPU set")]
    check.unchecked.append("GPU set (decide checks it from the runs' records)")
    return check


def candidate_unchanged(original: Identity, candidate: Identity) -> str | None:
    """A warning when the candidate's servers state the original's recipe and the
    candidate declares nothing different (None: something differs)."""
    fa, fb = recipe_facts(original), recipe_facts(candidate)
    if fa != fb:
        return None
    shown = "; ".join(fact_words(k, v) for k, v in fa.items()) or "no stated facts"
    return (
        "the candidate's servers state the same recipe as the original's "
        f"({shown}) and it declares no different fact (--arm-recipe): the switch may not "
        "have happened"
    )
