"""Probes against the simulated engine as a real process: what passes, and how each failure
is classified (DESIGN.md §5: contract vs availability vs client), retries, canary rounds and
round-robin endpoints.

One simulator process (two replicas) serves the whole module; each test uses its own run id
so that the fault rules, which match on ``X-Request-Id``, hit only that test's probes.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from probes import probe
from probes.gates import canary_sample, summarize
from probes.probe import ProbeOptions, ProbeSender
from probes.probe_record import BODY_LIMIT, Exchange
from probes.suite import BUILTIN_SUITES, Suite, load_suites
from soak.cli.demo import SimHandle
from tests.probes.probe_helpers import (
    closed_port,
    fast_sim,
    fault,
    first_tasks,
    make_runner,
    needle_suite,
    one_task,
    seen_request_ids,
)

pytestmark = pytest.mark.e2e

SHORT_TIMEOUT_S = 1.0

RULES = [
    fault("t500/before/json/1", "http_500"),
    fault("t503/before/json/1", "http_503"),
    fault("stall/before/json/1", "stall", stall_s=20),
    fault("stall/before/smoke/1", "stall", stall_s=20, after_tokens=2),
    fault("whole/before/smoke/1", "stall", stall_s=20, after_tokens=2),
    fault("whole/before/json/1", "stall", stall_s=20),
    fault("evt/before/smoke/1", "error_event", after_tokens=2),
    fault("evt/before/stream-tools/1", "error_event", after_tokens=1),
    fault("mal/before/stream-tools/1", "malformed", after_tokens=2),
    fault("mal/before/smoke/1", "malformed", after_tokens=1),
    fault("mal/before/json/1", "malformed"),
    fault("reset/before/smoke/1", "reset", after_tokens=2),
    fault("ctl/before/json/1", "json_control_char"),
    fault("inv/before/json/1", "json_invalid"),
    fault("wrong/before/tools/1", "tool_wrong_function"),
    fault("wrong/before/stream-tools/1", "tool_wrong_function"),
    fault("bad/before/tools/2", "tool_bad_arguments"),
    fault("bad/before/stream-tools/2", "tool_bad_arguments"),
    fault("tr/before/tool-result/1.call", "tool_bad_arguments"),
    fault("tr500/before/tool-result/1.answer", "http_500"),
    fault("retry/before/json/1", "http_500", count=1),
    fault("noretry/before/json/1", "http_500"),
    fault("allfail/before/json/1*", "http_500"),
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with fast_sim(*RULES, replicas=2) as handle:
        yield handle


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as c:
        yield c


@pytest.fixture
async def short_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(SHORT_TIMEOUT_S)) as c:
        yield c


# -- healthy server: every kind passes ---------------------------------------------------------


async def test_every_builtin_probe_kind_passes_on_a_healthy_sim(
    sim: SimHandle, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    # The built-in needle (4,000 tokens, code 48213) is replaced by a user suite file with a
    # small context. The simulator does not read its prompt, so the "code" is a space:
    # every word it writes starts with one (the real code is tested to fail below).
    user = tmp_path / "needle.json"
    user.write_bytes(orjson.dumps(needle_suite(" ", 200).model_dump(by_alias=True)))
    suites = load_suites(list(BUILTIN_SUITES), [user])
    assert suites["needle"].source == str(user)
    runner, sink = make_runner(client, sim.urls[:1], suites, "ok", model=sim.model)
    results = await runner.run_phase("before")

    bad = [f"{r.label}: {r.outcome} {r.reason}" for r in results if r.outcome != "pass"]
    assert bad == []
    gates = summarize(results)["before"]
    counts = {name: (g.passed, g.total) for name, g in gates.items()}
    assert counts == {
        "json": (24, 24),
        "tools": (8, 8),
        "stream-tools": (8, 8),
        "tool-result": (8, 8),
        "smoke": (1, 1),
        "needle": (1, 1),
    }
    assert all(g.attempts == g.total and not g.failures for g in gates.values())
    assert sorted(r.request_id for r in sink.results) == sorted(r.request_id for r in results)
    for r in results:
        assert r.status == 200 and r.reason == "" and r.evidence is None
        assert r.attempt == 0 and r.round is None and r.endpoint == 0
        assert r.request_id == f"ok/before/{r.suite}/{r.index}"
        assert r.requests == (2 if r.kind == "tool-result" else 1)
        assert r.completed == r.requests  # every exchange ended with a usage block
        assert r.prompt_tokens > 0 and r.completion_tokens > 0
        assert r.latency_s is not None and r.latency_s > 0
        assert r.finish_reason in ("stop", "length", "tool_calls")
    needle = next(r for r in results if r.suite == "needle")
    assert needle.prompt_tokens >= 200  # the filler really was sent
    # The server saw every probe under its own id (tool-result: two steps).
    seen = seen_request_ids(sim, 0)
    for r in results:
        if r.kind == "tool-result":
            assert {f"{r.request_id}.call", f"{r.request_id}.answer"} <= seen
        else:
            assert r.request_id in seen
    assert runner.done == {("before", name): total for name, (_, total) in counts.items()}


# -- failure classes ---------------------------------------------------------------------------

CASES = [
    # run id, suite, outcome, HTTP status, words the reason must hold
    ("t500", "json", "availability", 500, ["HTTP 500", "Internal server error"]),
    ("t503", "json", "availability", 503, ["HTTP 503", "Service unavailable"]),
    ("evt", "smoke", "availability", 200, ["error event inside the HTTP 200 stream"]),
    ("evt", "stream-tools", "availability", 200, ["error event inside the HTTP 200 stream"]),
    ("mal", "stream-tools", "availability", 200, ["malformed stream", "not JSON"]),
    ("mal", "smoke", "availability", 200, ["malformed stream"]),
    ("mal", "json", "availability", 200, ["malformed response body"]),
    ("reset", "smoke", "availability", 200, ["stream cut"]),
    ("ctl", "json", "contract", 200, ["not strict JSON", "control character U+0001"]),
    ("inv", "json", "contract", 200, ["not strict JSON"]),
    ("wrong", "tools", "contract", 200, ["called 'get_weather_v2', expected 'get_weather'"]),
    ("wrong", "stream-tools", "contract", 200, ["called 'get_weather_v2'", "'get_weather'"]),
    ("bad", "tools", "contract", 200, ["arguments of convert_currency", "schema violation"]),
    ("bad", "stream-tools", "contract", 200, ["arguments of convert_currency", "required"]),
    ("tr", "tool-result", "contract", 200, ["step 1 (tool call)", "schema violation"]),
    ("tr500", "tool-result", "availability", 500, ["step 2 (answer to the tool result)"]),
]


@pytest.mark.parametrize(
    ("run_id", "suite", "outcome", "status", "words"),
    CASES,
    ids=[f"{c[0]}-{c[1]}" for c in CASES],
)
async def test_failure_is_classified_with_words(
    sim: SimHandle,
    client: httpx.AsyncClient,
    run_id: str,
    suite: str,
    outcome: str,
    status: int,
    words: list[str],
) -> None:
    n = 2 if run_id == "bad" else 1  # bad arguments on tools task 2 (two tools to pick from)
    s = one_task(suite, n)
    runner, sink = make_runner(client, sim.urls[:1], {suite: s}, run_id, model=sim.model)
    results = await runner.run_phase("before")
    failed = [r for r in results if r.index == n]
    assert len(failed) == 1
    r = failed[0]
    assert (r.outcome, r.status) == (outcome, status), r.reason
    for w in words:
        assert w in r.reason
    assert len(sink.seen) == n  # no silent retry
    gate = summarize(results)["before"][suite]
    assert gate.passed == n - 1 and gate.total == n
    (f,) = gate.failures
    assert f.label == f"{suite}#{n} ({s.tasks[n - 1].id})"
    assert f.outcome == outcome and f.reason == r.reason and f.attempts == 1


async def test_contract_failures_still_count_the_tokens_served(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    runner, _ = make_runner(client, sim.urls[:1], {"json": one_task("json")}, "ctl")
    (r,) = await runner.run_phase("before")
    assert r.outcome == "contract"
    assert r.completed == 1 and r.prompt_tokens > 0 and r.completion_tokens > 0


async def test_http_error_counts_a_request_but_no_completion(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    runner, _ = make_runner(client, sim.urls[:1], {"json": one_task("json")}, "t500")
    (r,) = await runner.run_phase("before")
    assert (r.requests, r.completed, r.prompt_tokens, r.completion_tokens) == (1, 0, 0, 0)


@pytest.mark.parametrize(("suite", "cut"), [("json", "no answer"), ("smoke", "stream cut")])
async def test_stall_beyond_the_probe_timeout_is_availability_timeout(
    sim: SimHandle, short_client: httpx.AsyncClient, suite: str, cut: str
) -> None:
    runner, _ = make_runner(
        short_client, sim.urls[:1], {suite: one_task(suite)}, "stall", timeout_s=SHORT_TIMEOUT_S
    )
    (r,) = await runner.run_phase("before")
    assert r.outcome == "availability"
    assert "timeout" in r.reason and cut in r.reason
    assert r.latency_s is not None and r.latency_s < 10


async def test_connection_refused_is_availability(client: httpx.AsyncClient) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    runner, _ = make_runner(client, [url], {"json": one_task("json")}, "refused")
    (r,) = await runner.run_phase("before")
    assert r.outcome == "availability"
    assert r.status is None
    assert r.reason.startswith("no answer: ConnectError")
    assert (r.requests, r.completed) == (1, 0)


async def test_unknown_model_is_a_client_error(sim: SimHandle, client: httpx.AsyncClient) -> None:
    suites = {"json": one_task("json"), "smoke": one_task("smoke")}
    runner, _ = make_runner(client, sim.urls[:1], suites, "nomodel", model="no-such-model")
    results = await runner.run_phase("before")
    assert [(r.suite, r.outcome, r.status) for r in results] == [
        ("json", "client", 404),
        ("smoke", "client", 404),
    ]
    assert all("no-such-model" in r.reason for r in results)


@pytest.mark.parametrize(("suite", "cut"), [("json", "no answer"), ("smoke", "stream cut")])
async def test_the_probe_timeout_bounds_the_whole_probe_not_each_read(
    sim: SimHandle, client: httpx.AsyncClient, suite: str, cut: str
) -> None:
    # The client's per-read timeout is 10 s; the probe's own timeout (1 s) must still end
    # a probe whose server goes quiet mid-answer (or never answers) after about 1 s.
    runner, sink = make_runner(
        client, sim.urls[:1], {suite: one_task(suite)}, "whole", timeout_s=SHORT_TIMEOUT_S
    )
    t0 = time.monotonic()
    (r,) = await runner.run_phase("before")
    assert time.monotonic() - t0 < 5
    assert r.outcome == "availability"
    assert "no complete answer within 1 s" in r.reason and cut in r.reason, r.reason
    assert r.latency_s is not None and r.latency_s < 5
    (_, exchanges) = sink.seen[0]
    (ex,) = exchanges  # the exchange in flight is kept for evidence
    assert ex.error is not None and "no complete answer within 1 s" in ex.error
    if suite == "smoke":
        assert ex.status == 200 and "data:" in ex.text  # what arrived before the silence


def _trickle_client(stop: asyncio.Event) -> httpx.AsyncClient:
    """A server that sends the headers and then one SSE comment every 50 ms, forever: no
    single read ever waits long, only the whole answer never ends."""

    async def body() -> AsyncIterator[bytes]:
        while not stop.is_set():
            yield b": still thinking\n\n"
            await asyncio.sleep(0.05)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_a_trickling_stream_times_out_as_a_whole() -> None:
    stop = asyncio.Event()
    async with _trickle_client(stop) as c:
        sender = ProbeSender(c, ProbeOptions(model="m", timeout_s=0.5))
        try:
            outcome, reason, _, exchanges = await asyncio.wait_for(
                sender.run(one_task("smoke"), one_task("smoke").tasks[0], "http://t", "tr/1"),
                timeout=10,
            )
        finally:
            stop.set()
    assert outcome == "availability"
    assert reason == "stream cut: timeout, no complete answer within 0.5 s", reason
    assert exchanges[0].text.startswith(": still thinking")


async def test_an_undecodable_body_is_availability() -> None:
    # The server says gzip and sends something else: httpx.DecodingError is not a
    # TransportError, but it is still the server's answer that is broken.
    async def garbage() -> AsyncIterator[bytes]:  # streamed, as from a real server
        yield b"this is not gzip at all"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
            content=garbage(),
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
        sender = ProbeSender(c, ProbeOptions(model="m"))
        outcome, reason, _, exchanges = await sender.run(
            one_task("json"), one_task("json").tasks[0], "http://t", "dec/1"
        )
    assert outcome == "availability", reason
    assert reason.startswith("undecodable response body")
    assert exchanges[0].status == 200 and exchanges[0].error is not None

    # A good gzip body decodes and is judged as usual.
    good = gzip.compress(b'{"not": "a chat completion"}')

    def gz(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=good)

    async with httpx.AsyncClient(transport=httpx.MockTransport(gz)) as c:
        outcome, reason, _, _ = await ProbeSender(c, ProbeOptions(model="m")).run(
            one_task("json"), one_task("json").tasks[0], "http://t", "dec/2"
        )
    assert (outcome, reason.split(":")[0]) == ("availability", "malformed response body")


# -- size limits ---------------------------------------------------------------------------------


def _long_smoke(max_tokens: int) -> Suite:
    s = one_task("smoke")
    return s.model_copy(update={"defaults": {"max_tokens": max_tokens, "ignore_eos": True}})


async def test_a_stream_over_the_evidence_limit_is_judged_whole(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    # About 220 bytes of SSE per token: 5,200 tokens is over 1 MiB of stream. soaktop's
    # evidence cap must not turn a complete answer into "stream ended without [DONE]".
    runner, sink = make_runner(
        client, sim.urls[:1], {"smoke": _long_smoke(5200)}, "big", model=sim.model
    )
    (r,) = await runner.run_phase("before")
    assert r.outcome == "pass", r.reason
    assert r.completion_tokens == 5200
    (_, (ex,)) = sink.seen[0]
    assert len(ex.text.encode()) > BODY_LIMIT and ex.text.rstrip().endswith("[DONE]")
    ev = ex.as_evidence()
    assert ev["response"]["truncated"] is True
    assert len(ev["response"]["body"].encode()) <= BODY_LIMIT
    assert ex.text.startswith(ev["response"]["body"])


async def test_an_answer_larger_than_soaktop_keeps_is_a_client_outcome(
    sim: SimHandle, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe, "FULL_BODY_LIMIT", 256 * 1024)  # 64 MiB in real runs
    runner, sink = make_runner(
        client, sim.urls[:1], {"smoke": _long_smoke(2000)}, "huge", model=sim.model
    )
    (r,) = await runner.run_phase("before")
    assert r.outcome == "client", r.reason
    assert "answer larger than soaktop keeps" in r.reason and "256 KiB" in r.reason
    (_, (ex,)) = sink.seen[0]
    assert len(ex.text.encode()) <= 256 * 1024
    assert ex.as_evidence()["response"]["truncated"] is True


# -- a prompt too long for the model -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["json", "tools", "stream-tools", "tool-result", "smoke"])
async def test_a_prompt_over_the_context_length_is_a_client_error_for_every_kind(
    sim: SimHandle, client: httpx.AsyncClient, kind: str
) -> None:
    # A user suite whose prompt is longer than the model's context (8,192 tokens): the
    # server's 400 is the suite's size, not a broken contract.
    s = one_task(kind)
    task = s.tasks[0].model_copy(update={"prompt": "lorem ipsum dolor sit amet " * 4000})
    suites = {kind: s.model_copy(update={"tasks": [task]})}
    runner, _ = make_runner(client, sim.urls[:1], suites, "ctxlen", model=sim.model)
    (r,) = await runner.run_phase("before")
    assert r.status == 400 and "maximum context length" in r.reason, r.reason
    assert r.outcome == "client", r.reason
    assert "the suite's size" in r.reason


async def test_other_400s_stay_contract_failures(sim: SimHandle, client: httpx.AsyncClient) -> None:
    s = one_task("json")
    bad = s.model_copy(update={"defaults": {"max_tokens": 0}})  # refused: at least 1
    task = s.tasks[0].model_copy(update={"max_tokens": None})
    runner, _ = make_runner(
        client, sim.urls[:1], {"json": bad.model_copy(update={"tasks": [task]})}, "b400"
    )
    (r,) = await runner.run_phase("before")
    assert (r.status, r.outcome) == (400, "contract"), r.reason
    assert "max_tokens must be at least 1" in r.reason


# -- needle --------------------------------------------------------------------------------------


async def test_needle_that_cannot_fit_max_model_len_is_a_client_error_and_not_sent(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    models = (await client.get(f"{sim.urls[0]}/v1/models")).json()
    max_len = models["data"][0]["max_model_len"]
    suites = {"needle": needle_suite(" ", max_len)}
    runner, _ = make_runner(
        client, sim.urls[:1], suites, "nofit", model=sim.model, max_model_len=max_len
    )
    (r,) = await runner.run_phase("before")
    assert r.outcome == "client"
    assert "max_model_len" in r.reason and str(max_len) in r.reason
    assert r.requests == 0 and r.status is None
    assert "nofit/before/needle/1" not in seen_request_ids(sim, 0)


async def test_needle_missing_from_the_answer_is_a_contract_failure(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    # The simulator does not read its prompt: the answer never repeats the code.
    runner, _ = make_runner(
        client, sim.urls[:1], {"needle": needle_suite("48213", 200)}, "lost", model=sim.model
    )
    (r,) = await runner.run_phase("before")
    assert r.outcome == "contract"
    assert "does not contain the needle" in r.reason


async def test_needle_refused_by_the_server_for_its_length_is_a_client_error(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    models = (await client.get(f"{sim.urls[0]}/v1/models")).json()
    max_len = models["data"][0]["max_model_len"]  # 8192
    context = max_len - 1200  # passes the estimate; the real prompt is longer than max_len
    runner, _ = make_runner(
        client,
        sim.urls[:1],
        {"needle": needle_suite(" ", context)},
        "toolong",
        model=sim.model,
        max_model_len=max_len,
    )
    (r,) = await runner.run_phase("before")
    assert r.status == 400 and "maximum context length" in r.reason  # what really happened
    assert r.outcome == "client"


# -- retries -------------------------------------------------------------------------------------


async def test_retry_is_a_recorded_attempt_and_listed_as_passed_on_retry(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    runner, sink = make_runner(
        client, sim.urls[:1], {"json": one_task("json")}, "retry", model=sim.model, retries=1
    )
    results = await runner.run_phase("before")
    assert [(r.attempt, r.outcome, r.status) for r in results] == [
        (0, "availability", 500),
        (1, "pass", 200),
    ]
    assert [r.request_id for r in results] == ["retry/before/json/1", "retry/before/json/1.r1"]
    assert sink.results == results  # both attempts reached the sink
    gate = summarize(results)["before"]["json"]
    assert (gate.passed, gate.total, gate.attempts) == (1, 1, 2)
    assert gate.failures == []
    (p,) = gate.passed_on_retry
    assert p.attempts == 2 and p.outcome == "availability" and "HTTP 500" in p.reason
    assert p.request_id == "retry/before/json/1"
    assert {"retry/before/json/1", "retry/before/json/1.r1"} <= seen_request_ids(sim, 0)


async def test_without_retries_a_failure_is_final(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    runner, sink = make_runner(client, sim.urls[:1], {"json": one_task("json")}, "noretry")
    results = await runner.run_phase("before")
    assert len(results) == len(sink.seen) == 1
    gate = summarize(results)["before"]["json"]
    assert (gate.passed, gate.total, gate.attempts, gate.passed_on_retry) == (0, 1, 1, [])


async def test_retries_stop_at_the_limit(sim: SimHandle, client: httpx.AsyncClient) -> None:
    runner, sink = make_runner(
        client, sim.urls[:1], {"json": one_task("json")}, "allfail", model=sim.model, retries=2
    )
    results = await runner.run_phase("before")
    assert [(r.attempt, r.outcome) for r in results] == [
        (0, "availability"),
        (1, "availability"),
        (2, "availability"),
    ]
    assert [r.request_id for r in results] == [
        "allfail/before/json/1",
        "allfail/before/json/1.r1",
        "allfail/before/json/1.r2",
    ]
    assert len(sink.seen) == 3
    gate = summarize(results)["before"]["json"]
    assert (gate.passed, gate.total, gate.attempts, gate.passed_on_retry) == (0, 1, 3, [])
    (f,) = gate.failures
    assert f.attempts == 3 and f.request_id == "allfail/before/json/1.r2"  # the last attempt


# -- canary sampling -----------------------------------------------------------------------------


def test_canary_sample_rotates_through_the_suite() -> None:
    tasks = first_tasks("json", 5)
    rounds = [[i for i, _ in canary_sample(tasks, 2, r)] for r in range(1, 6)]
    assert rounds == [[1, 2], [3, 4], [5, 1], [2, 3], [4, 5]]
    assert [t.id for _, t in canary_sample(tasks, 2, 1)] == [tasks[0].id, tasks[1].id]
    # More per round than tasks: each task once, never twice in a round.
    assert sorted(i for i, _ in canary_sample(tasks, 9, 2)) == [1, 2, 3, 4, 5]


async def test_canary_rounds_rotate_and_carry_round_suffixes(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    suite = one_task("json", 3)
    runner, _ = make_runner(client, sim.urls[:1], {"json": suite}, "can", model=sim.model)
    results = []
    for rnd in (1, 2, 3):
        results += await runner.run_phase("canary", per_round=2, round_no=rnd)
    assert [(r.round, r.index) for r in results] == [(1, 1), (1, 2), (2, 3), (2, 1), (3, 2), (3, 3)]
    assert [r.request_id for r in results] == [
        "can/canary/json/1.1",
        "can/canary/json/2.1",
        "can/canary/json/3.2",
        "can/canary/json/1.2",
        "can/canary/json/2.3",
        "can/canary/json/3.3",
    ]
    assert all(r.outcome == "pass" and r.phase == "canary" for r in results)
    assert {r.request_id for r in results} <= seen_request_ids(sim, 0)
    gate = summarize(results)["canary"]["json"]
    assert (gate.passed, gate.total, gate.rounds) == (6, 6, 3)
    assert runner.done == {("canary", "json"): 6}


# -- round-robin endpoints -----------------------------------------------------------------------


async def test_tasks_alternate_endpoints_and_counts_stay_per_task(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    assert len(sim.urls) == 2
    suites = {"json": one_task("json", 24), "smoke": one_task("smoke")}
    runner, _ = make_runner(client, sim.urls, suites, "rr", model=sim.model)
    results = await runner.run_phase("before")
    assert [r.endpoint for r in results] == [k % 2 for k in range(25)]
    gates = summarize(results)["before"]
    assert (gates["json"].passed, gates["json"].total) == (24, 24)
    assert (gates["smoke"].passed, gates["smoke"].total) == (1, 1)
    # Each replica's own log shows exactly the probes sent to it.
    for ep in (0, 1):
        mine = {r.request_id for r in results if r.endpoint == ep}
        theirs = {r.request_id for r in results if r.endpoint != ep}
        seen = seen_request_ids(sim, ep)
        assert mine <= seen
        assert not theirs & seen
    assert sum(r.endpoint == 0 for r in results) == 13


async def test_canary_rounds_reach_every_endpoint(
    sim: SimHandle, client: httpx.AsyncClient
) -> None:
    runner, _ = make_runner(client, sim.urls, {"json": one_task("json", 3)}, "canrr")
    results = []
    for rnd in (1, 2, 3, 4):
        results += await runner.run_phase("canary", per_round=1, round_no=rnd)
    assert all(r.outcome == "pass" for r in results)
    assert {r.endpoint for r in results} == {0, 1}


def test_evidence_cuts_the_body_at_the_limit_on_a_character_boundary() -> None:
    short = Exchange(url="u", request_id="r", body={}, status=200, text="data: ok\n\n")
    assert short.as_evidence()["response"] | {"headers": None} == {
        "status": 200,
        "headers": None,
        "body": "data: ok\n\n",
        "truncated": False,
    }
    text = "é" * BODY_LIMIT  # two bytes each: twice the limit
    ev = Exchange(url="u", request_id="r", body={}, text=text).as_evidence()["response"]
    assert ev["truncated"] is True and ev["body"] == "é" * (BODY_LIMIT // 2)
    exact = Exchange(url="u", request_id="r", body={}, text="x" * BODY_LIMIT)
    assert exact.as_evidence()["response"]["truncated"] is False
