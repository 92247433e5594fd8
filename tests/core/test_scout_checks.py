"""What a scout checks after a switch, before it spends a run: a restored original must
be the original (probe against probe), a candidate that states and declares nothing
different is a warning."""

from __future__ import annotations

from soak.cli.scout_checks import candidate_unchanged, probed_identity, restoration_before_load
from soak.record.models import EndpointIdentity
from soak.record.sections import ServedModel


def _ep(version: str = "0.32.0", slots: int = 262_144, seqs: str = "32") -> EndpointIdentity:
    return EndpointIdentity(
        url="http://127.0.0.1:8000",
        reachable=True,
        engine="vllm",
        version=version,
        token_slots=slots,
        models=[ServedModel(id="m", root="org/m", max_model_len=8192)],
        recipe={"max_num_seqs": seqs},
    )


def test_the_same_server_again_is_restored_and_says_what_was_checked():
    check = restoration_before_load(
        probed_identity("m", [_ep()], {}), probed_identity("m", [_ep()], {})
    )
    assert check.matched
    summary = check.summary()
    assert summary.startswith("Original configuration restored")
    assert "version 0.32.0" in summary and "32 slots/replica" in summary
    assert "262,144 KV tokens" in summary
    # the GPU set is left to decide, which has the runs' records
    assert check.unchecked == ["GPU set (decide checks it from the runs' records)"]


def test_another_version_or_token_slot_count_is_not_the_original():
    original = probed_identity("m", [_ep()], {})
    check = restoration_before_load(original, probed_identity("m", [_ep(version="0.33.0")], {}))
    assert not check.matched
    assert any("0.32.0" in m and "0.33.0" in m for m in check.mismatches), check.mismatches
    check = restoration_before_load(original, probed_identity("m", [_ep(slots=320_000)], {}))
    assert any("262,144" in m and "320,000" in m for m in check.mismatches), check.mismatches


def test_a_candidate_that_states_and_declares_nothing_new_is_a_warning():
    original = probed_identity("m", [_ep()], {})
    warning = candidate_unchanged(original, probed_identity("m", [_ep()], {}))
    assert warning is not None and "the switch may not have happened" in warning
    assert candidate_unchanged(original, probed_identity("m", [_ep(seqs="64")], {})) is None
    # a fact only the operator knows (declared for the candidate arm) is a difference
    declared = probed_identity("m", [_ep()], {"kv_cache_dtype": "fp8"})
    assert candidate_unchanged(original, declared) is None
