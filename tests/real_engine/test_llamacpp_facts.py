"""ENGINE_FACTS' llama.cpp section, the fixtures and the mapping, against the real server.

Every metric name the facts and the mapping (``probes.engine_metrics.LLAMACPP``) rely on
must be on the live ``/metrics`` with the type the fixture says; the fixture must be what
this server sends (same families, types and HELP texts: a capture, not a guess); the SSE
details soaktop reads must be what the server streams.
"""

from __future__ import annotations

import json

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from probes.engine_metrics import LLAMACPP, parse_metrics
from soak.run.recipe_probe import llamacpp_facts
from tests.real_engine.conftest import LLAMA_SLOTS
from tests.real_engine.llama_capture import METRICS_FIXTURE, capture

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(120)]

# As ENGINE_FACTS.md lists them (llama.cpp), and the counters the mapping adds.
FACT_NAMES = {
    "llamacpp:requests_processing": "gauge",
    "llamacpp:requests_deferred": "gauge",
    "llamacpp:prompt_tokens_total": "counter",
    "llamacpp:prompt_tokens_cached_total": "counter",
    "llamacpp:tokens_predicted_total": "counter",
}


def families(text: str) -> dict[str, tuple[str, str]]:
    """Family name (as exposed) → (type, HELP)."""
    out = {}
    for f in text_string_to_metric_families(text):
        name = f.samples[0].name if f.samples else f.name
        out[name] = (f.type, f.documentation)
    return out


def test_metrics_sse_and_props_are_what_the_facts_say(llama_shared):
    srv = llama_shared
    # the tier's server listens on loopback only (BASE_ARGS' --host), nowhere else
    listening = {
        c.laddr.ip
        for c in psutil.Process(srv.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}, listening
    got = capture(srv)
    status, page = got["/metrics"]
    assert status == 200
    live = families(page.decode())
    for name, kind in FACT_NAMES.items():
        assert live.get(name, ("absent",))[0] == kind, (name, live.get(name))
    # "older builds had llamacpp:kv_cache_usage_ratio": this one has no KV gauge
    assert not any("kv_cache" in n for n in live), sorted(live)
    # every name the mapping reads is a real one (or the synthetic sum of real ones),
    # but the KV gauge kept for older builds
    for key, (names, _) in LLAMACPP.values.items():
        if key == "kv_usage":
            continue
        assert any(n in live or n in LLAMACPP.sums for n in names), names
    for parts in LLAMACPP.sums.values():
        assert set(parts) <= set(live), parts
    # the fixture is this server's page: same families, types and HELP texts
    assert families(METRICS_FIXTURE.read_text()) == live

    # SSE: data: chunks, the first a role delta with null content, a usage chunk with
    # choices [] (and prompt_tokens_details.cached_tokens), then [DONE]
    events = [e for e in got["sse"].decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), events[:3]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 8
    assert "cached_tokens" in usage_chunk["usage"]["prompt_tokens_details"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"

    # usage.prompt_tokens counts the cached tokens; prompt_tokens_total does not: the
    # mapping's prompt_tokens_total is their sum, as the reconciliation needs
    before = parse_metrics(page.decode())
    again = capture(srv)  # the same prompt: mostly served from the slot's cache
    after = parse_metrics(again["/metrics"][1].decode())
    usage = json.loads(again["sse"].decode().split("\n\n")[-3][6:])["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0, usage
    grew = after.values["prompt_tokens_total"] - before.values["prompt_tokens_total"]  # type: ignore[operator]
    assert grew == usage["prompt_tokens"], (grew, usage)
    assert after.values["running"] == 0 and after.values["waiting"] == 0

    # /props → the recipe facts; /slots has -np entries; no /version (404)
    facts = llamacpp_facts(json.loads(got["/props"][1]))
    assert facts["max_num_seqs"] == str(LLAMA_SLOTS) and facts["max_model_len"] == "2048"
    assert facts["version"] and facts["model_root"].endswith("tiny.gguf")
    assert len(json.loads(got["/slots"][1])) == LLAMA_SLOTS
    assert srv.get("/version")[0] == 404
    assert json.loads(got["/v1/models"][1])["data"][0]["id"] == srv.model
