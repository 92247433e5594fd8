"""Identity before load: what each endpoint says it is (DESIGN.md §1 step 1).

Control-plane calls use httpx (explicit timeouts); only the load's streaming hot path uses
aiohttp. An endpoint that does not answer is recorded as unreachable with the error, and
the runner turns that into a FAILED preflight instead of a load against nothing.
:func:`build_identity` is the record's ``identity`` section made of those answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import platform
import socket

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from loadgen.tls import tls_hint, verify
from probes.engine_metrics import get_page
from soak import __version__
from soak.record.gpu_telemetry import GpuIdentity
from soak.record.models import EndpointIdentity, Identity
from soak.record.sections import HostFacts, PromptPoolFacts, RunClock, ServedModel
from soak.run.recipe_probe import declared_recipe, probe_stated, stated_value
from soak.run.state import RunState, Watchers

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


_CACHE_CONFIG_FACTS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "prefix_caching",
}
"""``vllm:cache_config_info`` labels that are recipe facts → their canonical keys."""
CACHE_CONFIG_SOURCE = "/metrics vllm:cache_config_info"
SGLANG_SLOTS_SOURCE = "/metrics sglang:max_total_num_tokens"


def read_metrics(text: str, ident: EndpointIdentity) -> None:
    """Fill the engine name and vllm:cache_config_info (KV token slots) from /metrics,
    and the recipe facts those state (SGLang's token slots included)."""
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
            _cache_config_facts(ident)
        elif fam.name == "sglang:max_total_num_tokens" and fam.samples:
            value = fam.samples[0].value  # every rank of one replica states the same pool
            if math.isfinite(value) and 0 < value < 2**53:
                ident.recipe["token_slots"] = str(int(value))
                ident.recipe_sources.append(SGLANG_SLOTS_SOURCE)
    ident.engine = ident.engine or _detect_engine(names)


def _cache_config_facts(ident: EndpointIdentity) -> None:
    facts = {
        key: v
        for label, key in _CACHE_CONFIG_FACTS.items()
        if (v := stated_value(ident.cache_config.get(label))) is not None
    }
    if ident.token_slots is not None:
        facts["token_slots"] = str(ident.token_slots)
    if facts:
        ident.recipe.update(facts)
        ident.recipe_sources.append(CACHE_CONFIG_SOURCE)


async def probe_endpoint(
    client: httpx.AsyncClient, base: str, engine: str | None = None
) -> EndpointIdentity:
    """GET /v1/models, /version and /metrics of one endpoint, then the configuration
    endpoint of its engine (``engine``: ``--engine``; else the one /metrics names)."""
    ident = EndpointIdentity(url=base, reachable=False, recipe={}, recipe_sources=[])
    try:
        r = await client.get(f"{base}/v1/models")
    except httpx.HTTPError as e:
        ident.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        ident.error += tls_hint(base, ident.error)  # what a failed handshake means
        return ident
    ident.reachable = True
    if r.status_code != 200:
        ident.error = f"/v1/models answered HTTP {r.status_code}"
        return ident
    try:
        data = r.json().get("data", [])
        ident.models = [
            ServedModel(
                id=m.get("id"),
                max_model_len=m.get("max_model_len"),
                root=stated_value(m.get("root")),  # a recipe fact: bounded, one line
            )
            for m in data
        ]
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
    await probe_stated(client, base, ident, engine)
    return ident


async def probe_all(
    endpoints: list[str],
    headers: dict[str, str],
    timeout_s: float = 10.0,
    engine: str | None = None,
) -> list[EndpointIdentity]:
    """Identity of every endpoint, in their order, probed together (a slow configuration
    endpoint costs its seconds once, not once per replica)."""
    timeout = httpx.Timeout(timeout_s)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, verify=verify()) as client:
        return list(await asyncio.gather(*(probe_endpoint(client, b, engine) for b in endpoints)))


async def count_tokens(base: str, model: str, text: str, headers: dict[str, str]) -> int | None:
    """The server's token count for ``text`` via ``POST /tokenize`` (None if unsupported)."""
    return await tokenize_count(base, {"model": model, "prompt": text}, headers)


async def tokenize_count(base: str, body: dict[str, object], headers: dict[str, str]) -> int | None:
    """``POST /tokenize`` with ``body`` (a ``prompt``, or chat ``messages``): the server's
    ``count``, or None when it does not answer one (unsupported, an error, not a whole
    number)."""
    try:
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(30.0), headers=headers, verify=verify()
        ) as client:
            r = await client.post(f"{base}/tokenize", json=body)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        count = r.json().get("count")
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def config_sha256(public_config: dict[str, object]) -> str:
    """Hash of the (public) configuration, key order independent."""
    return hashlib.sha256(orjson.dumps(public_config, option=orjson.OPT_SORT_KEYS)).hexdigest()


def build_identity(state: RunState, watchers: Watchers) -> Identity:
    """The record's identity section (also written as ``identity.json`` before the load,
    so ``soaktop recover`` has it if the runner dies)."""
    cfg = state.config
    served = any(cfg.model in {m.id for m in ep.models} for ep in state.endpoints)
    engine = cfg.engine or next((e.engine for e in state.endpoints if e.engine), None)
    eps = state.endpoints
    host: dict[str, object] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        # uvloop or asyncio: part of the client's measured CPU cost per token
        "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    }
    red = state.redactor
    if cfg.redact:
        eps = [e.model_copy(update={"url": f"<endpoint {i}>"}) for i, e in enumerate(eps)]
    # With --redact the host's pseudonym: runs of one machine stay comparable.
    host["hostname"] = red.learn("host", socket.gethostname())
    identity = Identity(
        model=cfg.model,
        model_served=served,
        engine=engine or "unknown",
        endpoints=eps,
        config_sha256=config_sha256(red.obj(cfg.public_dict())),  # as config.json has it
        prompt_pool=PromptPoolFacts.model_validate(_pool_facts(state)),
        soaktop_version=__version__,
        host=HostFacts.model_validate(host),
        clock=RunClock.model_validate(state.clock),
        gpus=[
            GpuIdentity.model_validate(g) for src in watchers.gpu_sources for g in src.identity()
        ],
        recipe=declared_recipe(cfg.recipe, cfg.server_cmd_file, red),
    )
    return red.model(identity)  # every string: a /version or model id may name paths, hosts


def _pool_facts(state: RunState) -> dict[str, object]:
    if state.pool is None:
        return {}
    facts = state.pool.describe()
    if state.config.redact:  # the file path is the operator's, not part of the result
        facts["source"] = str(facts["source"]).split(":", 1)[0] + ":<redacted>"
        if isinstance(trace := facts.get("trace"), dict):
            trace["path"] = "<redacted>"
    return facts
