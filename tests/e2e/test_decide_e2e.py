"""``soaktop decide`` on real run directories (issue 15): a restored arm whose engine
reports another version is refused, naming both; with ``--allow-restoration-drift`` it is
decided, with a caveat and no promotion."""

from __future__ import annotations

from pathlib import Path

import orjson

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import only_run_dir, run_args, run_soaktop
from tests.e2e.test_scout_e2e import SCOUT


def _arm(tmp_path: Path, name: str, *engine_args: str) -> str:
    """One arm: a fresh simulated engine (decode 20 ms a token, prefill 200 µs an input
    token unless ``engine_args`` say otherwise) soaked with the scout's matrix."""
    out = tmp_path / name
    extra = ["--prefill-us-per-token", "200", "--decode-ms-base", "20", *engine_args]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        args = run_args(sim, out, "--matrix", SCOUT, "--max-tokens", "16", "--ignore-eos")
        rc, text = run_soaktop(*args, "--pool-seed", "3", timeout=240)
    assert rc == 0, text
    return str(only_run_dir(out))


def test_a_restored_arm_on_another_engine_version_is_refused_or_never_promoted(tmp_path):
    before = _arm(tmp_path, "before")
    fast = _arm(tmp_path, "fast", "--prefill-us-per-token", "20")
    restored = _arm(tmp_path, "restored", "--version-string", "0.33.0")
    runs = ["--before", before, "--candidate", fast, "--restored", restored]
    rc, text = run_soaktop("decide", *runs)
    assert rc == 2, text
    assert (
        "the restored run is not the original: engine version: original version 0.32.0, "
        "restored version 0.33.0" in text
    ), text
    assert "--allow-restoration-drift" in text

    rc, text = run_soaktop("decide", *runs, "--allow-restoration-drift", "--json")
    assert rc == 0, text
    d = orjson.loads(text)
    # the long-input cell is a measured win, but the restored control is another server
    assert d["cells"][1]["verdict"] == "win" and d["wins"] == 1, text
    assert d["decision"] == "retain original"
    assert "so no win can be attributed to the candidate: retain the original" in d["card"]
    rest = d["restoration"]
    assert rest["matched"] is False and rest["allowed_drift"] is True
    assert rest["mismatches"] == [
        "engine version: original version 0.32.0, restored version 0.33.0"
    ]
    # what the simulated engine states was checked and matched (its KV pool); the GPU
    # set is said to be unchecked, the runs having no GPU telemetry
    assert any(c.startswith("KV cache token slots per replica: ") for c in rest["checked"])
    assert any(u.startswith("GPU set (no GPU identity") for u in rest["unchecked"]), rest
    codes = [c["code"] for c in d["caveats"]]
    assert codes[0] == "restoration_drift"
    # only the prefill speed changed, which no server states: the recipes read the same
    assert "candidate_identical_recipe" in codes and d["candidate_changes"] == []
