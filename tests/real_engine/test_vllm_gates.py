"""Contract gates against a real vLLM, re-judged here from the raw answers soaktop kept.

The tiny random-weights model under xgrammar really breaks contracts now and then (a raw
control character inside a ``maxLength`` string, a number outside its bounds): those must
be classed *contract*, never availability. This test does not trust soaktop's judge: it
re-parses every raw response in ``evidence/`` with its own strict parser and validates it
with jsonschema directly, and the two verdicts must agree probe by probe.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import orjson
import pytest

from probes.suite import builtin_suite
from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import EXIT, soak_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(900)]


def _strict(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    # json.loads(strict=True) refuses control characters inside strings.
    return json.loads(text, parse_constant=no_constants)


def _valid(value_text: str | None, schema: dict[str, Any]) -> bool:
    try:
        value = _strict(value_text or "")
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def _sse_tool_calls(body: str) -> list[dict[str, Any]]:
    """Tool calls assembled from a raw SSE body, independently of probes.sse_events."""
    calls: dict[int, dict[str, Any]] = {}
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk.get("choices", []):
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"name": None, "arguments": ""})
                fn = tc.get("function") or {}
                c["name"] = fn.get("name") or c["name"]
                c["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


def _independent_verdict(
    probe: dict[str, Any], evidence: dict[str, Any], expected_fn: dict[str, str]
) -> bool:
    """True when this test's own reading of the raw answer says the contract held."""
    ex = evidence["exchanges"][-1]
    if ex["response"]["status"] != 200:
        return False
    body = ex["request"]["body"]
    text = ex["response"]["body"]
    if probe["kind"] == "json":
        content = json.loads(text)["choices"][0]["message"].get("content")
        return _valid(content, body["response_format"]["json_schema"]["schema"])
    if probe["kind"] in ("tools", "stream-tools"):
        if probe["kind"] == "tools":
            msg = json.loads(text)["choices"][0]["message"]
            calls = [c["function"] for c in msg.get("tool_calls") or []]
        else:
            calls = _sse_tool_calls(text)
        if len(calls) != 1 or calls[0]["name"] != expected_fn[probe["task"]]:
            return False
        tool = next(t for t in body["tools"] if t["function"]["name"] == calls[0]["name"])
        return _valid(calls[0]["arguments"], tool["function"]["parameters"])
    raise AssertionError(f"not re-judged here: {probe['kind']}")


def test_gates_before_and_after_agree_with_an_independent_check(vllm_logged, tmp_path):
    srv = vllm_logged
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(srv, out, "--gates", "json,tools,stream-tools,tool-result,smoke"),
        *("--probe-evidence", "all", "--probe-concurrency", "8", "--probe-timeout", "120"),
        # the random model may break a contract before the load: soak anyway, both phases
        "--force-load",
        *("--concurrency", "4", "--duration", "8", "--max-tokens", "32", "--ignore-eos"),
        timeout=800,
    )
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    probes = journal(run_dir, "probes.jsonl")
    assert rc == EXIT[rec["status"]], text[-3000:]

    expected_fn = {t.id: str(t.expect_function) for t in builtin_suite("tools").tasks}
    disagreements, contract = [], 0
    for p in probes:
        assert p["outcome"] in ("pass", "contract"), p  # a healthy server: no availability
        contract += p["outcome"] == "contract"
        if p["kind"] not in ("json", "tools", "stream-tools"):
            continue
        evidence = orjson.loads((run_dir / p["evidence"]).read_bytes())
        mine = _independent_verdict(p, evidence, expected_fn)
        if mine != (p["outcome"] == "pass"):
            disagreements.append((p["request_id"], p["outcome"], p["reason"], mine))
    assert not disagreements, disagreements

    # the record's counts are the journal's counts, for both phases and every suite
    for phase in ("before", "after"):
        gates = rec["gates"][phase]
        assert set(gates) == {"json", "tools", "stream-tools", "tool-result", "smoke"}
        assert (gates["json"]["total"], gates["tools"]["total"]) == (24, 8)
        for suite, g in gates.items():
            its_probes = [p for p in probes if p["phase"] == phase and p["suite"] == suite]
            assert g["passed"] == sum(p["outcome"] == "pass" for p in its_probes), (phase, suite)
        # the probes' own requests and tokens equal the server's counter deltas
        assert rec["reconciliation"][phase]["matched"] is True, rec["reconciliation"][phase]
    assert rec["reconciliation"]["load"]["matched"] is True, rec["reconciliation"]["load"]

    failed_gates = [r for r in rec["reasons"] if r["code"] == "gate_failed"]
    assert bool(failed_gates) == (contract > 0), rec["reasons"]
    if contract:
        assert rec["status"] in ("FAILED", "INVALID")
        assert all("(contract)" in r["message"] for r in failed_gates)
    print(f"contract failures of the random model: {contract} of {len(probes)} probes")
