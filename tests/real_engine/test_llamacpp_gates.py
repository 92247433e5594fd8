"""Contract gates against a real llama-server, re-judged here from the raw answers kept.

llama.cpp constrains ``response_format`` json_schema with its own grammar (GBNF) — syntax
and structure, not numeric bounds — and parses tool calls out of the text by the chat
template's format; it reads the tiny model's Hermes-style template as plain content, so
no tool call is ever forced. Each broken answer must be classed *contract* (the server
answered; the answer is wrong), never availability. The verdicts are re-judged from
``evidence/`` by test_vllm_gates's independent reader (its own strict parser, jsonschema
directly), probe by probe.
"""

from __future__ import annotations

import collections

import orjson
import pytest

from probes.suite import builtin_suite
from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import EXIT, soak_args
from tests.real_engine.test_vllm_gates import _independent_verdict

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

SUITES = ("json", "tools", "stream-tools", "tool-result", "smoke")


def test_gates_are_judged_honestly(llama_shared, tmp_path):
    srv = llama_shared
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(srv, out, "--gates", ",".join(SUITES)),
        *("--probe-evidence", "all", "--probe-concurrency", "2", "--probe-timeout", "120"),
        "--force-load",  # the random model breaks contracts: soak anyway, both phases
        *("--concurrency", "2", "--duration", "5", "--max-tokens", "16", "--ignore-eos"),
        timeout=500,
    )
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    probes = journal(run_dir, "probes.jsonl")
    assert rc == EXIT[rec["status"]], text[-3000:]

    expected_fn = {t.id: str(t.expect_function) for t in builtin_suite("tools").tasks}
    disagreements = []
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    for p in probes:
        # a healthy server: the answers may break the contract, the server never failed
        assert p["outcome"] in ("pass", "contract"), p
        outcomes[(p["suite"], p["outcome"])] += 1
        if p["kind"] not in ("json", "tools", "stream-tools"):
            continue
        evidence = orjson.loads((run_dir / p["evidence"]).read_bytes())
        mine = _independent_verdict(p, evidence, expected_fn)
        if mine != (p["outcome"] == "pass"):
            disagreements.append((p["request_id"], p["outcome"], p["reason"], mine))
    assert not disagreements, disagreements
    print("outcomes:", dict(sorted(outcomes.items())))

    for phase in ("before", "after"):
        gates = rec["gates"][phase]
        assert set(gates) == set(SUITES)
        assert (gates["json"]["total"], gates["tools"]["total"]) == (24, 8)
        for suite, g in gates.items():
            its = [p for p in probes if p["phase"] == phase and p["suite"] == suite]
            assert g["passed"] == sum(p["outcome"] == "pass" for p in its), (phase, suite)
        assert gates["smoke"]["passed"] == gates["smoke"]["total"], gates["smoke"]

    # Grammar-constrained JSON: llama.cpp honours response_format json_schema for syntax
    # and structure (a random model writes no JSON unconstrained), but its grammar does not
    # bound numbers: the only JSON contract failures are minimum/maximum violations.
    json_probes = [p for p in probes if p["suite"] == "json"]
    assert sum(p["outcome"] == "pass" for p in json_probes) >= len(json_probes) // 2
    for p in json_probes:
        if p["outcome"] == "contract":
            assert "schema violation" in p["reason"], p["reason"]
            assert "maximum" in p["reason"] or "minimum" in p["reason"], p["reason"]
    # Tool calls: this build reads the tiny model's Hermes-style template as plain content
    # (/props: chat_format "Content-only"), so tool_choice "required" constrains nothing and
    # the random model writes text. The server answered 200 every time: each such answer is
    # a contract failure ("no tool call"), never an availability one.
    props = srv.get_json("/props")
    if props["default_generation_settings"]["params"]["chat_format"] == "Content-only":
        for p in probes:
            if p["suite"] in ("tools", "stream-tools", "tool-result"):
                assert p["outcome"] == "contract" and "no tool call" in p["reason"], p

    contract = sum(n for (_, outcome), n in outcomes.items() if outcome == "contract")
    failed_gates = [r for r in rec["reasons"] if r["code"] == "gate_failed"]
    assert bool(failed_gates) == (contract > 0), rec["reasons"]
    assert all("(contract)" in r["message"] for r in failed_gates)
