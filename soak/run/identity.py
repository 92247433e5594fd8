"""Identity before load: what each endpoint says it is (DESIGN.md §1 step 1).

Control-plane calls use httpx (explicit timeouts); only the load's streaming hot path uses
aiohttp. An endpoint that does not answer is recorded as unreachable with the error, and
the runner turns that into a FAILED preflight instead of a load against nothing.
"""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from probes.engine_metrics import get_page
from soak.record.models import EndpointIdentity

_ENGINE_PREFIXES = (
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("tgi_", "tgi"),
    ("llamacpp:", "llamacpp"),
)


OPTIONAL_TIMEOUT_S = 2.0
"""/version and /metrics are optional here: a hung one must not hold the run's start
(the telemetry coverage reports a /metrics that never answers)."""


def _detect_engine(names: set[str]) -> str | None:
    for prefix, engine in _ENGINE_PREFIXES:
        if any(n.startswith(prefix) for n in names):
            return engine
    return None


def read_metrics(text: str, ident: EndpointIdentity) -> None:
    """Fill the engine name and vllm:cache_config_info (KV token slots) from /metrics."""
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        if fam.name == "vllm:cache_config_info" and fam.samples and not ident.cache_config:
            labels = dict(fam.samples[0].labels)
            ident.cache_config = labels
            try:
                ident.token_slots = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
            except (KeyError, ValueError):
                ident.token_slots = None
    ident.engine = ident.engine or _detect_engine(names)


async def probe_endpoint(client: httpx.AsyncClient, base: str) -> EndpointIdentity:
    """GET /v1/models, /version and /metrics of one endpoint."""
    ident = EndpointIdentity(url=base, reachable=False)
    try:
        r = await client.get(f"{base}/v1/models")
    except httpx.HTTPError as e:
        ident.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return ident
    ident.reachable = True
    if r.status_code != 200:
        ident.error = f"/v1/models answered HTTP {r.status_code}"
        return ident
    try:
        data = r.json().get("data", [])
        ident.models = [{"id": m.get("id"), "max_model_len": m.get("max_model_len")} for m in data]
    except (ValueError, AttributeError):
        ident.error = "/v1/models did not answer the OpenAI list shape"
    try:
        v = await client.get(f"{base}/version", timeout=OPTIONAL_TIMEOUT_S)
        if v.status_code == 200:
            ident.version = str(v.json().get("version"))
    except (httpx.HTTPError, ValueError, AttributeError):
        pass  # /version is vLLM-specific; other engines lack it
    try:
        # Streamed and capped like every scrape (a huge page or a gzip bomb is refused).
        page = await asyncio.wait_for(get_page(client, f"{base}/metrics"), OPTIONAL_TIMEOUT_S)
        if isinstance(page, bytes):
            read_metrics(page.decode("utf-8", "replace"), ident)
    except (httpx.HTTPError, ValueError, TimeoutError):
        pass  # metrics are optional for the load; telemetry reports their absence
    return ident


async def probe_all(
    endpoints: list[str], headers: dict[str, str], timeout_s: float = 10.0
) -> list[EndpointIdentity]:
    """Identity of every endpoint, probed one after the other (there are few)."""
    timeout = httpx.Timeout(timeout_s)
    async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
        return [await probe_endpoint(client, base) for base in endpoints]


async def count_tokens(base: str, model: str, text: str, headers: dict[str, str]) -> int | None:
    """The server's token count for ``text`` via ``POST /tokenize`` (None if unsupported)."""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), headers=headers) as client:
            r = await client.post(f"{base}/tokenize", json={"model": model, "prompt": text})
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        count = r.json().get("count")
    except ValueError:
        return None
    return int(count) if isinstance(count, int) else None
