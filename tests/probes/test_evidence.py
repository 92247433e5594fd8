"""What a failed probe leaves in the run directory: ``evidence/``, ``probes.jsonl`` and the
events, written by :class:`GateSession` against the simulated engine process.

An engineer opening the run afterwards must find the whole request, what came back, the
reason and the server's log lines for that request; never the API key; and, with
``--redact``, never the endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from probes.gates import GatePlan, summarize
from probes.probe import ProbeOptions
from probes.probe_record import ProbeResult
from probes.suite import Suite
from soak.cli.demo import SimHandle
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.record.redact import Redactor
from soak.run.gate_session import (
    GateSession,
    evidence_name,
    gates_from_journal,
    probe_accounting,
    server_log_excerpt,
)
from tests.probes.probe_helpers import fast_sim, fault, one_task

pytestmark = pytest.mark.e2e

SECRET = "sk-secret-123"
AUTH = {"Authorization": f"Bearer {SECRET}"}

RULES = [
    fault("ev/*/json/2", "http_500"),
    fault("ev/*/json/3", "json_control_char"),
    fault("ev/*/smoke/1", "error_event", after_tokens=2),
    fault("ev/*/tool-result/1.answer", "http_500"),
    fault("rr/before/json/2", "http_500"),
    fault("again/before/json/1", "http_500", count=1),
    fault("can/canary/json/2.*", "json_invalid"),
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with fast_sim(*RULES, replicas=2) as handle:
        yield handle


def make_session(
    run_dir: Path,
    endpoints: list[str],
    suites: dict[str, Suite],
    run_id: str,
    *,
    server_logs: list[Path] | None = None,
    redact: bool = False,
    headers: dict[str, str] | None = None,
    retries: int = 0,
    evidence_all: bool = False,
) -> GateSession:
    run_dir.mkdir(parents=True, exist_ok=True)
    origin = time.perf_counter_ns()
    redactor = Redactor(endpoints, redact)
    events = EventLog(JsonlWriter(run_dir / "events.jsonl"), origin, redactor)
    plan = GatePlan(
        run_id=run_id,
        endpoints=endpoints,
        suites=suites,
        origin_ns=origin,
        concurrency=4,
        retries=retries,
    )
    return GateSession(
        run_dir=run_dir,
        plan=plan,
        options=ProbeOptions(model="tiny-sim", timeout_s=10.0),
        headers=AUTH if headers is None else headers,
        events=events,
        redactor=redactor,
        server_logs=server_logs or [],
        evidence_all=evidence_all,
    )


async def close(session: GateSession) -> None:
    await session.aclose()
    session.events.writer.close()


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc


def every_file_text(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): p.read_text(errors="replace")
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def mixed_suites() -> dict[str, Suite]:
    return {
        "json": one_task("json", 3),
        "tool-result": one_task("tool-result"),
        "smoke": one_task("smoke"),
    }


# -- a failed probe's evidence ----------------------------------------------------------------


async def test_failed_probe_evidence_holds_request_response_reason_and_log(
    sim: SimHandle, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "INFO engine started\n"
        "INFO Received request chatcmpl-ev/before/json/2: prompt_tokens: 37\n"
        "ERROR something unrelated\n"
    )
    run_dir = tmp_path / "run"
    suites = {"json": one_task("json", 3)}
    session = make_session(run_dir, sim.urls[:1], suites, "ev", server_logs=[log])
    try:
        gates = await session.run("before")
    finally:
        await close(session)

    assert (gates["json"].passed, gates["json"].total) == (1, 3)
    assert session.failed("before")
    assert sorted(p.name for p in (run_dir / "evidence").iterdir()) == [
        "before-json-2.json",
        "before-json-3.json",
    ]

    doc = load(run_dir / "evidence" / "before-json-2.json")
    probe = doc["probe"]
    assert probe["outcome"] == "availability"
    assert probe["reason"].startswith("HTTP 500")
    assert probe["request_id"] == "ev/before/json/2"
    assert probe["evidence"] == "evidence/before-json-2.json"
    (ex,) = doc["exchanges"]
    task = suites["json"].tasks[1]
    assert ex["request"] == {
        "method": "POST",
        "url": f"{sim.urls[0]}/v1/chat/completions",
        "x_request_id": "ev/before/json/2",
        "body": {
            "model": "tiny-sim",
            "stream": False,
            "max_tokens": 256,
            "temperature": 0,
            "messages": [{"role": "user", "content": task.prompt}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": task.id, "schema": task.schema_, "strict": True},
            },
        },
    }
    assert ex["response"]["status"] == 500
    assert "Internal server error" in ex["response"]["body"]
    assert ex["response"]["truncated"] is False
    assert ex["error"] is None and ex["latency_s"] > 0
    (logs,) = doc["server_logs"]
    assert logs["path"] == str(log)
    assert logs["matching_request_id"] == [
        "INFO Received request chatcmpl-ev/before/json/2: prompt_tokens: 37"
    ]
    assert logs["tail"][-1] == "ERROR something unrelated"

    # A contract failure keeps the answer exactly as it came (the raw control character).
    doc3 = load(run_dir / "evidence" / "before-json-3.json")
    assert doc3["probe"]["outcome"] == "contract"
    assert "control character U+0001" in doc3["probe"]["reason"]
    (ex3,) = doc3["exchanges"]
    assert ex3["response"]["status"] == 200
    content = orjson.loads(ex3["response"]["body"])["choices"][0]["message"]["content"]
    assert "\x01" in content

    # probes.jsonl: one line per attempt, pointing at the evidence.
    lines = list(read_jsonl(run_dir / "probes.jsonl"))
    assert sorted((ln["index"], ln["outcome"], ln["evidence"]) for ln in lines) == [
        (1, "pass", None),
        (2, "availability", "evidence/before-json-2.json"),
        (3, "contract", "evidence/before-json-3.json"),
    ]
    # The events name the failure and where its evidence is.
    gate_events = [e for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] == "gate"]
    failed = {e["data"].get("evidence") for e in gate_events if e["severity"] == "error"}
    assert {"evidence/before-json-2.json", "evidence/before-json-3.json"} <= failed
    assert any("json 1/3" in e["message"] for e in gate_events)


async def test_two_step_probe_evidence_holds_both_exchanges(sim: SimHandle, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls[:1], {"tool-result": one_task("tool-result")}, "ev")
    try:
        await session.run("before")
    finally:
        await close(session)
    doc = load(run_dir / "evidence" / "before-tool-result-1.json")
    assert doc["probe"]["reason"].startswith("step 2 (answer to the tool result): HTTP 500")
    assert [e["request"]["x_request_id"] for e in doc["exchanges"]] == [
        "ev/before/tool-result/1.call",
        "ev/before/tool-result/1.answer",
    ]
    assert [e["response"]["status"] for e in doc["exchanges"]] == [200, 500]
    # The second request carries the call and the tool result back.
    roles = [m["role"] for m in doc["exchanges"][1]["request"]["body"]["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert doc["server_logs"] == "no server log configured (--server-log PATH)"


async def test_passing_probes_write_no_evidence(sim: SimHandle, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls[:1], mixed_suites(), "clean")
    try:
        gates = await session.run("before")
    finally:
        await close(session)
    assert all(g.passed == g.total for g in gates.values())
    assert not (run_dir / "evidence").exists()
    lines = list(read_jsonl(run_dir / "probes.jsonl"))
    assert len(lines) == 5 and all(ln["evidence"] is None for ln in lines)
    assert not session.failed("before")


async def test_evidence_names_the_replica_log_of_the_failed_probe(
    sim: SimHandle, tmp_path: Path
) -> None:
    logs = [Path(r["log"]) for r in sim.ready["replicas"]]
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls, {"json": one_task("json", 2)}, "rr", server_logs=logs)
    try:
        await session.run("before")
    finally:
        await close(session)
    doc = load(run_dir / "evidence" / "before-json-2.json")
    assert doc["probe"]["endpoint"] == 1
    (excerpt,) = doc["server_logs"]
    assert excerpt["path"] == str(logs[1])
    matching = excerpt["matching_request_id"]
    assert matching and all("rr/before/json/2" in ln for ln in matching)
    assert any("fault http_500 injected" in ln for ln in matching)
    assert any('"POST /v1/chat/completions HTTP/1.1" 500' in ln for ln in matching)


# -- secrets and redaction --------------------------------------------------------------------


async def test_api_key_never_reaches_the_run_dir(sim: SimHandle, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO Received request chatcmpl-ev/before/json/2\n")
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls[:1], mixed_suites(), "ev", server_logs=[log])
    try:
        await session.run("before")
    finally:
        await close(session)
    files = every_file_text(run_dir)
    assert sum(name.startswith("evidence/") for name in files) == 4  # 2 json, tool-result, smoke
    assert "probes.jsonl" in files and "events.jsonl" in files
    for name, text in files.items():
        assert SECRET not in text, name
        assert "authorization" not in text.lower(), name
        assert "bearer" not in text.lower(), name


async def test_redaction_keeps_the_endpoint_out_of_evidence(sim: SimHandle, tmp_path: Path) -> None:
    url = sim.urls[0]
    netloc = url.removeprefix("http://")
    run_dir = tmp_path / "run"
    server_log = Path(sim.ready["replicas"][0]["log"])  # real lines with 127.0.0.1 peers
    session = make_session(
        run_dir, [url], mixed_suites(), "ev", server_logs=[server_log], redact=True
    )
    try:
        await session.run("before")
    finally:
        await close(session)
    files = every_file_text(run_dir)
    assert any(name.startswith("evidence/") for name in files)
    for name, text in files.items():
        assert url not in text, name
        assert netloc not in text, name
        assert "127.0.0.1" not in text, name
    doc = load(run_dir / "evidence" / "before-json-2.json")
    assert doc["exchanges"][0]["request"]["url"] == "<endpoint 0>/v1/chat/completions"
    # The rest of the evidence is intact.
    assert doc["exchanges"][0]["request"]["body"]["model"] == "tiny-sim"
    assert doc["server_logs"][0]["matching_request_id"]


async def test_redaction_keeps_the_server_log_path_out_of_evidence(
    sim: SimHandle, tmp_path: Path
) -> None:
    log = tmp_path / "operator-home" / "vllm-server.log"
    log.parent.mkdir()
    log.write_text("INFO Received request chatcmpl-ev/before/json/2\n")
    run_dir = tmp_path / "run"
    session = make_session(
        run_dir, sim.urls[:1], {"json": one_task("json", 2)}, "ev", server_logs=[log], redact=True
    )
    try:
        await session.run("before")
    finally:
        await close(session)
    text = (run_dir / "evidence" / "before-json-2.json").read_text()
    assert "operator-home" not in text


async def test_evidence_all_writes_passing_probes_too(sim: SimHandle, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    session = make_session(
        run_dir, sim.urls[:1], {"json": one_task("json", 2)}, "ev", evidence_all=True
    )
    try:
        await session.run("before")
    finally:
        await close(session)
    names = sorted(p.name for p in (run_dir / "evidence").iterdir())
    assert names == ["before-json-1.json", "before-json-2.json"]
    ok = load(run_dir / "evidence" / "before-json-1.json")
    assert ok["probe"]["outcome"] == "pass"
    assert ok["exchanges"][0]["response"]["status"] == 200
    lines = {ln["index"]: ln["evidence"] for ln in read_jsonl(run_dir / "probes.jsonl")}
    assert lines == {1: "evidence/before-json-1.json", 2: "evidence/before-json-2.json"}


# -- the record's gates from the journal ------------------------------------------------------


def dump(gates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {p: {s: g.model_dump() for s, g in suites.items()} for p, suites in gates.items()}


async def metric_totals(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    text = (await client.get(f"{url}/metrics")).text
    totals = {"vllm:prompt_tokens_total": 0.0, "vllm:generation_tokens_total": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in totals:
                totals[s.name] += s.value
    return totals["vllm:prompt_tokens_total"], totals["vllm:generation_tokens_total"]


async def test_journal_recomputes_the_live_gates_and_accounts_requests(
    sim: SimHandle, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    url = sim.urls[1]  # tests run one at a time: nothing else reaches it meanwhile
    # No mid-stream failure here: a request cut after prefill counts prompt tokens on the
    # server that the client never sees in a usage block, so the totals would not be exact.
    suites = {"json": one_task("json", 3), "tool-result": one_task("tool-result")}
    session = make_session(run_dir, [url], suites, "ev")
    async with httpx.AsyncClient() as scraper:
        p0, g0 = await metric_totals(scraper, url)
        try:
            before = await session.run("before")
            p1, g1 = await metric_totals(scraper, url)
            after = await session.run("after")
        finally:
            await close(session)
        p2, g2 = await metric_totals(scraper, url)

    live = summarize(session.results)
    journaled, bad = gates_from_journal(run_dir)
    assert not bad and dump(journaled) == dump(live)
    assert dump({"before": before, "after": after}) == dump(live)
    assert {s: (g.passed, g.total) for s, g in live["after"].items()} == {
        "json": (1, 3),
        "tool-result": (0, 1),
    }

    acc = probe_accounting(run_dir / "probes.jsonl")
    assert set(acc) == {"before", "after"}
    for phase in ("before", "after"):
        mine = [r for r in session.results if r.phase == phase]
        assert acc[phase] == {
            "requests": sum(r.requests for r in mine),
            "completed": sum(r.completed for r in mine),
            "prompt_tokens": sum(r.prompt_tokens for r in mine),
            "completion_tokens": sum(r.completion_tokens for r in mine),
        }
        # 3 json + 2 tool-result steps sent; the two HTTP 500s (json#2, the tool-result
        # answer) never completed; the contract failure (json#3) did.
        assert acc[phase]["requests"] == 5
        assert acc[phase]["completed"] == 3
    # The client's tokens match the server's counters exactly, phase by phase.
    assert (acc["before"]["prompt_tokens"], acc["before"]["completion_tokens"]) == (
        p1 - p0,
        g1 - g0,
    )
    assert (acc["after"]["prompt_tokens"], acc["after"]["completion_tokens"]) == (
        p2 - p1,
        g2 - g1,
    )


# -- retries and canary rounds in the run dir -------------------------------------------------


async def test_retry_keeps_the_first_failure_as_evidence(sim: SimHandle, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls[:1], {"json": one_task("json")}, "again", retries=1)
    try:
        gates = await session.run("before")
    finally:
        await close(session)
    gate = gates["json"]
    assert (gate.passed, gate.total, gate.attempts) == (1, 1, 2)
    (p,) = gate.passed_on_retry
    assert p.evidence == "evidence/before-json-1.json"
    assert sorted(p.name for p in (run_dir / "evidence").iterdir()) == ["before-json-1.json"]
    lines = list(read_jsonl(run_dir / "probes.jsonl"))
    assert sorted((ln["attempt"], ln["outcome"]) for ln in lines) == [
        (0, "availability"),
        (1, "pass"),
    ]
    assert dump(gates_from_journal(run_dir)[0]) == dump(summarize(session.results))


async def test_canary_failure_evidence_is_named_by_round(sim: SimHandle, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    session = make_session(run_dir, sim.urls[:1], {"json": one_task("json", 3)}, "can")
    try:
        for rnd in (1, 2):
            await session.runner.run_phase("canary", per_round=2, round_no=rnd)
    finally:
        await close(session)
    # Round 1 sends tasks 1, 2; round 2 sends 3, 1: only task 2 is broken.
    names = sorted(p.name for p in (run_dir / "evidence").iterdir())
    assert names == ["canary-json-2-round1.json"]
    doc = load(run_dir / "evidence" / names[0])
    assert doc["probe"]["request_id"] == "can/canary/json/2.1"
    assert doc["probe"]["outcome"] == "contract"
    gates = gates_from_journal(run_dir)[0]["canary"]["json"]
    assert (gates.passed, gates.total, gates.rounds) == (3, 4, 2)
    assert gates.failures[0].round == 1


def result(**kw: Any) -> ProbeResult:
    base: dict[str, Any] = {
        "phase": "after",
        "suite": "json",
        "kind": "json",
        "task": "t",
        "index": 7,
        "request_id": "r",
        "outcome": "availability",
        "t_s": 1.0,
        "wall": "w",
    }
    return ProbeResult(**(base | kw))


def test_evidence_names() -> None:
    assert evidence_name(result()) == "evidence/after-json-7.json"
    assert evidence_name(result(phase="canary", round=3)) == "evidence/canary-json-7-round3.json"
    assert evidence_name(result(attempt=1)) == "evidence/after-json-7-r1.json"


# -- server log excerpts ----------------------------------------------------------------------


def test_log_excerpt_of_a_missing_file_says_so(tmp_path: Path) -> None:
    got = server_log_excerpt(tmp_path / "nope.log", "x")
    assert got["path"] == str(tmp_path / "nope.log")
    assert got["error"].startswith("cannot read")


def test_log_excerpt_is_bounded_and_drops_the_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    lines = [f"line {i:06d} " + "x" * 90 for i in range(2000)]  # ~200 KB
    log.write_text("\n".join(lines) + "\nlast run/after/json/7 here\n")
    got = server_log_excerpt(log, "run/after/json/7")
    assert len(got["tail"]) == 200
    assert got["tail"][-1] == "last run/after/json/7 here"
    assert got["matching_request_id"] == ["last run/after/json/7 here"]
    assert all(len(ln) >= 100 for ln in got["tail"][:-1])  # no half line at the start


def test_log_excerpt_does_not_match_other_probes_sharing_a_prefix(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    own = [
        "INFO Received request chatcmpl-run/before/json/1: prompt_tokens: 37",
        'INFO "POST /v1/chat/completions HTTP/1.1" 500 X-Request-Id: run/before/json/1',
    ]
    others = [
        "INFO Received request chatcmpl-run/before/json/12: prompt_tokens: 40",
        'INFO "POST /v1/chat/completions HTTP/1.1" 200 X-Request-Id: run/before/json/12',
        'INFO "POST /v1/chat/completions HTTP/1.1" 200 X-Request-Id: run/before/json/1.r1',
    ]
    log.write_text("\n".join([own[0], others[0], own[1], others[1], others[2]]) + "\n")
    got = server_log_excerpt(log, "run/before/json/1")
    assert got["matching_request_id"] == own
