"""A run's serving recipe: what the servers stated about their configuration, and what
the operator declared that no server says.

Two recipes are "the same" only when every fact both state is equal; seed 000's table
header is exactly the facts two recipes differed in ("32 slots/replica · 95% allocation"
vs "64 slots/replica · 90% allocation"), and seed 004's decision rests on the restored
arm matching the original on them ("identity/recipe/image/endpoint/GPU bindings
matched").

**Stated facts** live per endpoint (``EndpointIdentity.recipe``), under the canonical
keys of :data:`STATED_KEYS` whatever engine stated them (vLLM's ``max_num_seqs``,
SGLang's ``max_running_requests`` and TGI's ``max_concurrent_requests`` are all
``max_num_seqs``: the sequences one replica runs at once). Older records lack that dict;
:func:`endpoint_facts` then derives what it can from the fields they do have (``version``,
``token_slots``, the ``vllm:cache_config_info`` labels, ``/v1/models``).

**Declared facts** (``Identity.recipe.declared``) are the operator's ``--recipe
key=value`` and the config's ``[recipe]`` table: checkpoint revision, image, TP/DP size,
weight and KV precision, notes. A declared key that a server also states keeps both:
the stated one under its key, the declared one as ``"<key> (declared)"``.

Everything here reads a record; nothing here asks a server (``soak.run.identity`` and
``soak.run.recipe_probe`` do that).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pydantic import Field

from soak.record.shape import Section

if TYPE_CHECKING:
    from soak.record.models import EndpointIdentity, Identity

DECLARED_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
"""A declared key: lower case, starts with a letter, at most 64 characters."""
MAX_DECLARED_VALUE = 500
"""A declared value's length limit (a note, not a document)."""


class Recipe(Section):
    """``identity.recipe``: what the operator declared about the recipe (schema 1.3)."""

    declared: dict[str, str] = Field(default_factory=dict)
    """``--recipe key=value`` (repeatable) and the config's ``[recipe]`` table, in the
    operator's words (``--redact`` redacts them like every other string)."""
    server_cmd: str | None = None
    """The server's exact launch command from ``--server-cmd-file``, secrets scrubbed
    (API keys, tokens, auth headers, passwords: ``soak.record.redact_patterns``)."""
    server_cmd_sha256: str | None = None
    """SHA-256 of the scrubbed command as stored (two runs launched alike hash alike)."""


def _pct(v: str) -> str:
    try:
        return f"{float(v) * 100:g}%"
    except ValueError:
        return v


def _count(v: str) -> str:
    try:
        return f"{int(float(v)):,}"
    except ValueError:
        return v


def _on_off(v: str) -> str:
    low = v.strip().lower()
    if low in ("true", "1", "yes", "on", "enabled"):
        return "on"
    if low in ("false", "0", "no", "off", "disabled", "none"):
        return "off"
    return v


STATED_KEYS: dict[str, tuple[str, Callable[[str], str]]] = {
    # key: (what it is, how one value reads in a column header)
    "engine": ("serving engine", lambda v: v),
    "version": ("engine version", lambda v: f"version {v}"),
    "model_root": ("model root or path the server loaded", lambda v: f"root {v}"),
    "revision": ("checkpoint revision (commit, tag or SHA)", lambda v: f"revision {v}"),
    "max_model_len": ("maximum context length", lambda v: f"max len {_count(v)}"),
    "max_num_seqs": (
        "sequences one replica runs at once",
        lambda v: f"{_count(v)} slots/replica",
    ),
    "gpu_memory_utilization": (
        "GPU memory allocation target",
        lambda v: f"{_pct(v)} GPU memory",
    ),
    "token_slots": ("KV cache token slots per replica", lambda v: f"{_count(v)} KV tokens"),
    "block_size": ("KV block size in tokens", lambda v: f"block {v}"),
    "kv_cache_dtype": ("KV cache precision", lambda v: f"KV {v}"),
    "dtype": ("weight/activation dtype", lambda v: f"dtype {v}"),
    "quantization": ("weight quantization", lambda v: f"quant {v}"),
    "tensor_parallel_size": ("tensor-parallel size", lambda v: f"TP{v}"),
    "pipeline_parallel_size": ("pipeline-parallel size", lambda v: f"PP{v}"),
    "data_parallel_size": ("data-parallel size", lambda v: f"DP{v}"),
    "speculative": ("speculative decoding", lambda v: f"spec {v}"),
    "prefix_caching": ("prefix caching", lambda v: f"prefix cache {_on_off(v)}"),
    "max_num_batched_tokens": (
        "tokens one scheduler step batches",
        lambda v: f"batch {_count(v)} tokens",
    ),
    "chunked_prefill": ("chunked prefill", lambda v: f"chunked prefill {_on_off(v)}"),
    "chunked_prefill_size": (
        "tokens one prefill chunk holds",
        lambda v: f"prefill chunk {_count(v)} tokens",
    ),
}
"""The canonical stated keys, whatever engine stated them, in header order."""

_FROM_CACHE_CONFIG = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "prefix_caching",
}
"""``vllm:cache_config_info`` labels → canonical keys (records written before 1.3)."""


def endpoint_facts(ep: EndpointIdentity) -> dict[str, str]:
    """The canonical facts one endpoint stated (its ``recipe``, else what an older
    record's identity fields give)."""
    out: dict[str, str] = {}
    if ep.engine:
        out["engine"] = ep.engine
    if ep.version:
        out["version"] = ep.version
    for label, key in _FROM_CACHE_CONFIG.items():
        if (v := ep.cache_config.get(label)) not in (None, "", "None"):
            out[key] = str(v)
    if ep.token_slots is not None:
        out["token_slots"] = str(ep.token_slots)
    for m in ep.models[:1]:  # the served model; a LoRA adapter lists after it
        if m.root:
            out["model_root"] = m.root
        if m.max_model_len is not None:
            out["max_model_len"] = str(m.max_model_len)
    out.update({k: v for k, v in ep.recipe.items() if v not in ("", "None")})
    return out


def _joined(values: Iterable[str | None]) -> str | None:
    """One value when every endpoint agrees, ``a / b`` when they do not, None when no
    endpoint stated it; an endpoint that did not state a fact others did reads ``?``."""
    vals = list(values)
    known = [v for v in vals if v is not None]
    if not known:
        return None
    seen = list(dict.fromkeys("?" if v is None else v for v in vals))
    return seen[0] if len(seen) == 1 else " / ".join(seen)


def recipe_facts(identity: Identity | None) -> dict[str, str]:
    """Every fact of the run's recipe: stated ones (joined over the reachable endpoints)
    in :data:`STATED_KEYS` order, then the declared ones, then the command's hash."""
    if identity is None:
        return {}
    per_ep = [endpoint_facts(ep) for ep in identity.endpoints if ep.reachable]
    out: dict[str, str] = {}
    keys = list(STATED_KEYS) + sorted({k for f in per_ep for k in f} - set(STATED_KEYS))
    for key in keys:
        if (v := _joined(f.get(key) for f in per_ep)) is not None:
            out[key] = v
    for key, value in sorted(identity.recipe.declared.items()):
        out[f"{key} (declared)" if key in out else key] = value
    if identity.recipe.server_cmd_sha256:
        out["server_cmd_sha256"] = identity.recipe.server_cmd_sha256
    return out


def fact_words(key: str, value: str) -> str:
    """How one fact reads in a column header: ``32 slots/replica``, ``95% GPU memory``;
    a declared fact as ``key value``."""
    if key in STATED_KEYS:
        return STATED_KEYS[key][1](value)
    if key == "server_cmd_sha256":
        return f"launch cmd {value[:12]}"
    return f"{key} {value}"


def fact_title(key: str) -> str:
    """What a fact is, in words (``sequences one replica runs at once``)."""
    if key in STATED_KEYS:
        return STATED_KEYS[key][0]
    if key == "server_cmd_sha256":
        return "launch command (SHA-256 of the scrubbed text)"
    return f"{key} (declared by the operator)" if not key.endswith("(declared)") else key


def differing_facts(facts: list[dict[str, str]]) -> list[str]:
    """Keys whose values differ between the recipes (a key one recipe lacks differs only
    when the others state it), in the first recipe's order."""
    if len(facts) < 2:
        return []
    keys = list(dict.fromkeys(k for f in facts for k in f))
    return [k for k in keys if len({f.get(k) for f in facts}) > 1]


def parse_declared(items: Iterable[str]) -> dict[str, str]:
    """``["revision=abc123", "image=vllm:0.32"]`` → a dict; ValueError naming the item,
    the problem and what is allowed."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--recipe {item!r}: expected KEY=VALUE (e.g. revision=abc123)")
        out[check_declared(key, value.strip())] = value.strip()
    return out


def check_declared(key: str, value: str) -> str:
    """The key, when it and its value are allowed; ValueError saying what is."""
    if not DECLARED_KEY.match(key):
        raise ValueError(
            f"recipe key {key!r}: use lower case letters, digits, '_', '.', '-' "
            "(starting with a letter, at most 64 characters)"
        )
    if not value:
        raise ValueError(f"recipe key {key!r} has an empty value")
    if len(value) > MAX_DECLARED_VALUE or any(ord(c) < 32 for c in value):
        raise ValueError(
            f"recipe {key}: the value must be one line of at most {MAX_DECLARED_VALUE} "
            f"characters without control characters (got {len(value)} characters)"
        )
    return key
