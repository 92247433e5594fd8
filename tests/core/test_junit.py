"""``--junit``: a record as JUnit XML that a CI system reads as test results, valid against
the JUnit schema (tests/fixtures/junit.xsd), whatever text a server put in the record."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from soak.outputs.junit import junit_xml, write_junit, xml_text
from soak.record.models import RunRecord

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[1] / "fixtures" / "junit.xsd")
# A server's answer quoted in a reason: a terminal escape, NUL (XML 1.0 cannot hold it), a
# CDATA end, markup, a noncharacter, a lone surrogate and a bidi override.
HOSTILE = '\x1b]0;PWNED\x07 \x00 ]]> <b>&amp;</b> "q" \ufffe \ud800 \u202e'


def _failure(label: str, outcome: str = "availability", **kw: Any) -> dict[str, Any]:
    return {
        "label": label,
        "outcome": outcome,
        "reason": kw.pop("reason", "HTTP 500: " + HOSTILE),
        "status": kw.pop("status", 500),
        "request_id": f"r/{label}",
        "t_s": 12.0,
        "wall": "2026-12-02T00:00:12Z",
        **kw,
    }


def _record(**over: Any) -> RunRecord:
    raw: dict[str, Any] = {
        "run_id": "m__base__vllm__soak__1202-000000",
        "status": "FAILED",
        "exit_code": 1,
        "config": {},
        "reasons": [
            {
                "code": "gate_failed",
                "effect": "failed",
                "message": "after-load json 23/24: " + HOSTILE,
            },
            {"code": "gate_failed", "effect": "failed", "message": "after-load tools 7/8"},
            {"code": "load_clean", "effect": "note", "message": "load: 0 failures in 900 requests"},
            {
                "code": "gate_cut_short",
                "effect": "invalid",
                "message": "canary smoke: 1 of 2 never ran",
            },
        ],
        "gates": {
            "after": {
                "json": {"passed": 23, "total": 24, "failures": [_failure("json#7 (invoice)")]},
                "tools": {"passed": 8, "total": 8},
            },
            "before": {"json": {"passed": 24, "total": 24}},
            "canary": {
                "smoke": {"passed": 1, "total": 2, "not_run": 1},
                "tools": {
                    "passed": 3,
                    "total": 4,
                    "failures": [_failure("tools#1", "client", reason="bad suite", status=None)],
                },
            },
        },
        "thresholds": [
            {
                "expr": "ttft.p99<1s",
                "condition": "p99 TTFT < 1 s",
                "metric": "ttft.p99",
                "state": "breached",
                "observed": 1.7,
                "limit": 1.0,
                "source": "record",
                "first_breach_s": 40.0,
            },
            {
                "expr": "e2e.p99<20s",
                "condition": "p99 E2E < 20 s",
                "metric": "e2e.p99",
                "state": "ok",
                "observed": 3.1,
                "limit": 20.0,
                "source": "record",
            },
            {
                "expr": "gpu.temp<90",
                "condition": "GPU temperature < 90",
                "metric": "gpu.temp",
                "state": "no_data",
                "observed": None,
                "limit": 90.0,
                "source": "telemetry",
            },
        ],
        "phases": [
            {"name": "before_gates", "start_s": 0.5, "end_s": 4.5},
            {"name": "load", "start_s": 4.5, "end_s": 64.5},
            {"name": "after_gates", "start_s": 64.5, "end_s": 70.0},
        ],
        "started_at": "2026-12-02T00:00:00.000+00:00",
        "ended_at": "2026-12-02T00:01:10.000+00:00",
    }
    return RunRecord.model_validate(raw | over)


def _cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname", ""), c.get("name", "")): c for c in root.iter("testcase")}


def test_valid_against_the_junit_schema_with_hostile_server_text():
    data = junit_xml(_record())
    SCHEMA.validate(data.decode())  # raises with the line and the rule on any breach
    text = data.decode()
    assert "\x1b" not in text and "\x00" not in text and "\ufffe" not in text
    assert "<b>" not in text  # markup from the server is text, not elements
    root = ET.fromstring(data)
    msg = _cases(root)[("soaktop.gates.after-load", "json")].find("failure")
    assert msg is not None
    # what the CI shows: the escape visible, the markup as the characters it was
    assert "\\x1b]0;PWNED\\x07" in msg.get("message", "")
    assert "]]> <b>&amp;</b>" in msg.get("message", "")
    assert "\\ud800" in (msg.text or "") and "\\u202e" in (msg.text or "")


def test_one_case_per_gate_phase_and_suite_threshold_and_reason():
    root = ET.fromstring(junit_xml(_record()))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert list(suites) == ["soaktop.gates", "soaktop.thresholds", "soaktop.verdict"]
    gates = [(c.get("classname"), c.get("name")) for c in suites["soaktop.gates"].iter("testcase")]
    assert gates == [
        ("soaktop.gates.before-load", "json"),
        ("soaktop.gates.canary", "smoke"),
        ("soaktop.gates.canary", "tools"),
        ("soaktop.gates.after-load", "json"),
        ("soaktop.gates.after-load", "tools"),
    ]
    assert [c.get("name") for c in suites["soaktop.thresholds"].iter("testcase")] == [
        "ttft.p99<1s",
        "e2e.p99<20s",
        "gpu.temp<90",
    ]
    verdict = [c.get("name") for c in suites["soaktop.verdict"].iter("testcase")]
    assert verdict == [
        "verdict",
        "gate_failed (1)",
        "gate_failed (2)",
        "load_clean",
        "gate_cut_short",
    ]


def test_outcomes_follow_the_verdict_rules_and_the_counts_add_up():
    root = ET.fromstring(junit_xml(_record()))
    cases = _cases(root)

    def kind(key: tuple[str, str]) -> str:
        return next((e.tag for e in cases[key] if e.tag in ("failure", "error", "skipped")), "pass")

    assert kind(("soaktop.gates.after-load", "json")) == "failure"  # an HTTP 500
    assert kind(("soaktop.gates.after-load", "tools")) == "pass"
    assert kind(("soaktop.gates.canary", "smoke")) == "error"  # cut short: could not say
    assert kind(("soaktop.gates.canary", "tools")) == "error"  # soaktop's own config
    assert kind(("soaktop.thresholds", "ttft.p99<1s")) == "failure"
    assert kind(("soaktop.thresholds", "e2e.p99<20s")) == "pass"
    assert kind(("soaktop.thresholds", "gpu.temp<90")) == "skipped"  # no data is no pass
    assert kind(("soaktop.verdict", "verdict")) == "failure"
    assert kind(("soaktop.verdict.note", "load_clean")) == "pass"
    assert kind(("soaktop.verdict.invalid", "gate_cut_short")) == "error"
    th = cases[("soaktop.thresholds", "ttft.p99<1s")].find("failure")
    assert th is not None and "observed 1.7, limit 1" in th.get("message", "")
    assert "first breached live at 40 s" in th.get("message", "")
    for suite in root.iter("testsuite"):
        tags = [e.tag for c in suite.iter("testcase") for e in c]
        assert int(suite.get("tests", "")) == len(list(suite.iter("testcase")))
        assert int(suite.get("failures", "")) == tags.count("failure")
        assert int(suite.get("errors", "")) == tags.count("error")
        assert int(suite.get("skipped", "")) == tags.count("skipped")
    assert root.get("tests") == "13" and root.get("failures") == "5" and root.get("errors") == "3"
    gate_time = cases[("soaktop.gates.after-load", "json")].get("time")
    assert gate_time == "5.500"  # the after_gates phase


@pytest.mark.parametrize(("status", "tag"), [("INVALID", "error"), ("ABORTED", "error")])
def test_an_invalid_or_aborted_run_is_an_error_not_a_pass(status: str, tag: str) -> None:
    rec = _record(status=status, exit_code=3, reasons=[], gates={}, thresholds=[])
    root = ET.fromstring(junit_xml(rec))
    (case,) = root.iter("testcase")
    (outcome,) = list(case)
    assert outcome.tag == tag and outcome.get("type") == status
    assert "no reason recorded" in outcome.get("message", "")
    SCHEMA.validate(junit_xml(rec).decode())


def test_a_passed_run_has_no_failure_and_says_so(tmp_path):
    rec = _record(
        status="PASSED",
        exit_code=0,
        reasons=[],
        thresholds=[],
        gates={
            "before": {"json": {"passed": 24, "total": 24}},
        },
    )
    path = tmp_path / "junit.xml"
    write_junit(rec, path)
    root = ET.parse(path).getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0" and root.get("tests") == "2"
    assert not [e for e in root.iter() if e.tag in ("failure", "error", "skipped")]
    SCHEMA.validate(str(path))


def test_xml_text_keeps_lines_and_writes_what_xml_cannot_hold_as_escapes():
    assert xml_text("a\nb\tc") == "a\nb\tc"
    assert xml_text("\x00\x1b\ufffe\uffff\ud800") == "\\x00\\x1b\\ufffe\\uffff\\ud800"
    assert xml_text("plain <&> text") == "plain <&> text"  # the serialiser escapes these
