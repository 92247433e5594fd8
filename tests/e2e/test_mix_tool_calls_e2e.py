"""A mix's tool-call classes against the simulated engine over real HTTP (issue 16 §2): the
calls the engine streams are checked as the tools gate checks its own — a call of a tool
the request did not declare (or not the one ``tool_choice`` names) and arguments that break
the tool's schema are ``contract_error`` of that class in record.json, with the words that
say which; every other answer of the same classes passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e

MIX = """
[[class]]
name = "weather"                 # one tool, any call of it
weight = 1
max_tokens = 64
tool_choice = "required"

[[class.tools]]
type = "function"
function.name = "get_weather"
function.parameters.type = "object"
function.parameters.required = ["city"]
function.parameters.additionalProperties = false
function.parameters.properties.city = {type = "string"}

[[class]]
name = "clock"                   # two tools, tool_choice names one of them
weight = 1
max_tokens = 64
tool_choice = {type = "function", function = {name = "get_time"}}

[[class.tools]]
type = "function"
function.name = "get_time"
function.parameters.type = "object"
function.parameters.required = ["tz"]
function.parameters.properties.tz = {type = "string"}

[[class.tools]]
type = "function"
function.name = "get_weather"
function.parameters.type = "object"
function.parameters.required = ["city"]
function.parameters.properties.city = {type = "string"}
"""
BAD_ARGUMENTS = 3
WRONG_FUNCTION = 3
"""Load requests the engine breaks, each fault once per request (its ``count`` is global)."""


def test_bad_tool_calls_are_contract_failures_of_their_class_and_good_ones_pass(
    tmp_path: Path,
) -> None:
    mix = tmp_path / "tools.toml"
    mix.write_text(MIX)
    faults = [
        {"match": "*/load/*", "action": "tool_bad_arguments", "count": BAD_ARGUMENTS},
        {"match": "*/load/*", "action": "tool_wrong_function", "count": WRONG_FUNCTION},
    ]
    extra = ["--decode-ms-base", "5"]
    for fault in faults:
        extra += ["--fault", json.dumps(fault)]
    out = tmp_path / "runs"
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=extra) as sim:
        args = run_args(sim, out, "--mix", str(mix), "--concurrency", "4", "--duration", "3")
        _rc, text = run_soaktop(*args, timeout=120)
    assert out.is_dir(), text
    run_dir = only_run_dir(out)
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text
    rec = record(run_dir)
    classes = {c["name"]: c["load"] for c in rec["classes"]}
    assert set(classes) == {"weather", "clock"}, text
    # every broken answer, and only those, is a contract failure of its own class
    assert sum(c["failed"] for c in classes.values()) == BAD_ARGUMENTS + WRONG_FUNCTION, classes
    for load in classes.values():
        assert set(load["failures_by_class"]) <= {"contract_error"}, load
        assert load["completed"] > 0, load  # the engine's good calls pass the same checks
    assert rec["load"]["failures_by_class"] == {"contract_error": BAD_ARGUMENTS + WRONG_FUNCTION}

    lines = [ln for ln in journal(run_dir) if ln["phase"] == "load"]
    broken = [ln for ln in lines if ln["failure"] == "contract_error"]
    assert all(ln["status"] == 200 for ln in broken)
    details = {(ln["workload_class"], ln["detail"]) for ln in broken}
    expected = {
        ("weather",
         "tool call 0 get_weather: schema violation at /: 'city' is a required property"),
        ("weather",
         "tool call 0 names 'get_weather_v2', not a declared tool (declared: get_weather)"),
        ("clock", "tool call 0 get_time: schema violation at /: 'tz' is a required property"),
        ("clock", "tool call 0 names 'get_weather', not get_time (tool_choice names it)"),
    }  # fmt: skip
    assert details <= expected, details
    # each fault broke at least one answer, whichever class its requests fell in
    assert any("schema violation" in d for _, d in details), details
    assert any("names '" in d for _, d in details), details
    assert "contract_error" in text
