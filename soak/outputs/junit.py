"""A run's record as JUnit XML (``--junit FILE``, ``soaktop junit RUN_DIR``), so a CI system
shows a failed soak as it shows a failed test.

One ``<testsuite>`` per kind of check, one ``<testcase>`` per check:

- ``soaktop.gates``: one case per gate phase and suite (``classname`` ``soaktop.gates.
  before-load``, name ``json``). A suite with a failed task is a ``<failure>``; one whose
  failures were all soaktop's own configuration (``client``), or whose tasks never all ran,
  is an ``<error>`` (the check could not say) — as the verdict judges them
  (:func:`soak.judge.verdict.gate_reasons`).
- ``soaktop.thresholds``: one case per threshold: ``breached`` is a failure, ``no_data``
  skipped (nothing to check is not a pass).
- ``soaktop.verdict``: the whole-run verdict first (a failure unless PASSED), then one
  case per reason: ``failed`` a failure, ``invalid`` and ``aborted`` an error, a ``note``
  passes and carries its words in ``<system-out>``.

Case names are stable across runs (``json``, the threshold's expression, the reason's
code), so a CI system's history lines the same check up run after run; the scores go in
the messages. Every message can quote a server (an HTTP 500's body, a model id): it is
made safe as every shown text is (:func:`soak.safe_text.safe_text`), and any character
XML 1.0 cannot hold is written as a visible escape, so the file always parses. The
serialiser escapes ``&``, ``<``, ``>`` and quotes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from probes.gates import PHASE_WORDS, GateFailure, SuiteGate
from soak.record.models import PhaseSpan, Reason, RunRecord, Status, write_atomic
from soak.record.sections import ThresholdState
from soak.safe_text import safe_line, safe_text

# What XML 1.0 allows (its Char production): tab, newline, CR and the ranges below.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MESSAGE_CHARS = 1_000
"""A ``message`` attribute's length at most (the element's text holds the whole)."""
_PHASE_SPANS = {"before": "before_gates", "after": "after_gates"}


def xml_text(value: object) -> str:
    """``value`` as text an XML 1.0 file can hold and a reader can show: controls and
    invisibles escaped (:func:`safe_text`), and whatever XML cannot hold at all (a lone
    surrogate, U+FFFE) escaped the same way."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", safe_text(value))


def _message(value: object) -> str:
    line = _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", safe_line(value))
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"


class _Suite:
    """One ``<testsuite>`` being filled, with its counts."""

    def __init__(self, name: str, time_s: float | None = None) -> None:
        self.el = ET.Element("testsuite", name=name)
        self.time_s = time_s
        self.counts: Counter[str] = Counter()

    def case(self, classname: str, name: str, time_s: float | None = None) -> ET.Element:
        self.counts["tests"] += 1
        attrs = {"classname": classname, "name": xml_text(name)}
        if time_s is not None:
            attrs["time"] = f"{time_s:.3f}"
        return ET.SubElement(self.el, "testcase", attrs)

    def outcome(self, case: ET.Element, kind: str, kind_type: str, message: str, body: str) -> None:
        """Mark ``case`` a ``failure``, ``error`` or ``skipped`` with its words."""
        self.counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1
        el = ET.SubElement(case, kind, type=xml_text(kind_type), message=_message(message))
        el.text = xml_text(body)

    def done(self) -> ET.Element:
        for key in ("tests", "failures", "errors", "skipped"):
            self.el.set(key, str(self.counts[key]))
        if self.time_s is not None:
            self.el.set("time", f"{self.time_s:.3f}")
        return self.el


def _span_s(phases: list[PhaseSpan], name: str) -> float | None:
    """Seconds the run spent in phase ``name`` (None: it never ended one)."""
    spans = [(p.start_s, p.end_s) for p in phases if p.name == name and p.end_s is not None]
    return sum(end - start for start, end in spans if end is not None) if spans else None


def _failure_line(f: GateFailure) -> str:
    http = f" HTTP {f.status}" if f.status is not None else ""
    when = f" round {f.round} at {f.t_s:.0f} s" if f.round is not None else ""
    evidence = f"; evidence {f.evidence}" if f.evidence else ""
    return (
        f"{f.label}{when}: {f.reason} ({f.outcome}{http}; request {f.request_id}, "
        f"endpoint {f.endpoint}, {f.attempts} attempt{'s' * (f.attempts != 1)}{evidence})"
    )


def _gate_case(suite: _Suite, phase: str, name: str, g: SuiteGate, time_s: float | None) -> None:
    words = PHASE_WORDS.get(phase, phase)
    case = suite.case(f"soaktop.gates.{words.split(' ')[0]}", name, time_s)
    score = f"{words} {name} {g.passed}/{g.total}"
    lines = [_failure_line(f) for f in g.failures]
    if g.not_run:
        lines.append(f"{g.not_run} of {g.total} tasks never ran (the phase was cut short)")
    lines += [f"passed on retry: {_failure_line(f)}" for f in g.passed_on_retry]
    if g.failures and not all(f.outcome == "client" for f in g.failures):
        suite.outcome(case, "failure", "gate_failed", f"{score}: {lines[0]}", "\n".join(lines))
    elif g.failures or g.not_run:
        why = "gate_client_error" if g.failures else "gate_cut_short"
        suite.outcome(case, "error", why, f"{score}: {lines[0]}", "\n".join(lines))
    else:
        out = ET.SubElement(case, "system-out")
        out.text = xml_text("\n".join([score, *lines]))


def _gates(record: RunRecord) -> ET.Element:
    suite = _Suite("soaktop.gates")
    order = {"before": 0, "canary": 1, "after": 2}
    for phase in sorted(record.gates, key=lambda p: (order.get(p, 3), p)):
        time_s = _span_s(record.phases, _PHASE_SPANS.get(phase, ""))
        for name, g in sorted(record.gates[phase].items()):
            _gate_case(suite, phase, name, g, time_s)
    return suite.done()


def _threshold_case(suite: _Suite, t: ThresholdState) -> None:
    case = suite.case("soaktop.thresholds", t.expr)
    seen = "no data" if t.observed is None else f"observed {t.observed:g}"
    words = f"{t.condition}: {seen}, limit {t.limit:g} ({t.source})"
    if t.first_breach_s is not None:
        words += f"; first breached live at {t.first_breach_s:.0f} s"
    if t.state == "breached":
        suite.outcome(case, "failure", "threshold_breached", words, words)
    elif t.state == "no_data":
        suite.outcome(case, "skipped", "no_data", words, words)
    else:
        ET.SubElement(case, "system-out").text = xml_text(words)


def _thresholds(record: RunRecord) -> ET.Element:
    suite = _Suite("soaktop.thresholds")
    for t in record.thresholds:
        _threshold_case(suite, t)
    return suite.done()


def _reason_names(reasons: list[Reason]) -> list[str]:
    """Each reason's case name: its code, numbered where a code repeats."""
    total, seen = Counter(r.code for r in reasons), Counter[str]()
    names = []
    for r in reasons:
        seen[r.code] += 1
        names.append(r.code if total[r.code] == 1 else f"{r.code} ({seen[r.code]})")
    return names


def _verdict(record: RunRecord) -> ET.Element:
    spans = [p for p in record.phases if p.end_s is not None]
    run_s = max(p.end_s or 0.0 for p in spans) - min(p.start_s for p in spans) if spans else None
    suite = _Suite("soaktop.verdict", run_s)
    props = ET.SubElement(suite.el, "properties")
    for name, value in _properties(record).items():
        ET.SubElement(props, "property", name=name, value=xml_text(value))
    case = suite.case("soaktop.verdict", "verdict", run_s)
    counted = [r for r in record.reasons if r.effect != "note"]
    head = f"{record.status.value} (exit {record.exit_code})"
    if record.status is not Status.PASSED:
        first = counted[0].message if counted else "no reason recorded"
        body = "\n".join(f"{r.effect}: {r.message}" for r in counted) or first
        kind = "failure" if record.status is Status.FAILED else "error"
        suite.outcome(case, kind, record.status.value, f"{head}: {first}", body)
    else:
        ET.SubElement(case, "system-out").text = xml_text(f"{head}: all checks held")
    for name, r in zip(_reason_names(record.reasons), record.reasons, strict=True):
        case = suite.case(f"soaktop.verdict.{r.effect}", name)
        if r.effect == "note":
            ET.SubElement(case, "system-out").text = xml_text(r.message)
        else:
            kind = "failure" if r.effect == "failed" else "error"
            suite.outcome(case, kind, r.code, r.message, r.message)
    return suite.done()


def _properties(record: RunRecord) -> dict[str, str]:
    out = {
        "run_id": record.run_id,
        "status": record.status.value,
        "exit_code": str(record.exit_code),
        "started_at": record.started_at,
        "ended_at": record.ended_at,
    }
    if record.identity is not None:
        out |= {"model": record.identity.model, "engine": record.identity.engine}
    if record.load is not None:
        out["completed_requests"] = str(record.load.completed)
        out["failed_requests"] = str(record.load.failed)
    return out


def junit_xml(record: RunRecord) -> bytes:
    """The record as a JUnit XML document (UTF-8, with its declaration)."""
    root = ET.Element("testsuites", name=xml_text(f"soaktop {record.run_id}"))
    totals: Counter[str] = Counter()
    for suite in (_gates(record), _thresholds(record), _verdict(record)):
        root.append(suite)
        for key in ("tests", "failures", "errors"):
            totals[key] += int(suite.get(key, "0"))
    for key in ("tests", "failures", "errors"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    xml: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return xml + b"\n"


def write_junit(record: RunRecord, path: Path) -> None:
    """Write :func:`junit_xml` to ``path`` atomically (a reader never sees half of it)."""
    write_atomic(path, junit_xml(record))
