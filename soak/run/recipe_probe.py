"""The recipe as the servers state it and as the operator declares it (issue 15 §1).

**Stated.** After ``/v1/models``, ``/version`` and ``/metrics``
(:func:`soak.run.identity.probe_endpoint`), the engine's own configuration endpoint is
asked — only the detected engine's (or ``--engine``'s) — and its answer mapped onto the
canonical keys of :data:`soak.record.recipe.STATED_KEYS`:

- vLLM: ``GET /server_info?config_format=json`` (only with ``VLLM_SERVER_DEV_MODE=1``;
  a 404 is the production default, silent). Only the mapped fields of ``vllm_config`` are
  kept: never ``vllm_env`` or ``system_env`` (environment, paths), never
  ``model_config.hf_token``.
- SGLang: ``GET /get_server_info`` (newer builds: ``/server_info``), flat server
  arguments and scheduler facts (the answer holds ``api_key`` too: never kept).
- TGI: ``GET /info``; llama.cpp: ``GET /props``.

Every answer is bounded (:func:`probes.engine_metrics.get_page`'s cap, a short timeout)
and distrusted: a value is kept only as a scalar, as one line of escaped text of at most
:data:`MAX_VALUE` characters; a wrong type, a container or garbage is left out and never
raises.

**Declared.** ``--recipe key=value`` / ``[recipe]`` and ``--server-cmd-file``, with every
credential in the command scrubbed (:func:`soak.record.redact_patterns.scrub_secrets`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson

from probes.engine_metrics import get_page
from soak.record.models import EndpointIdentity
from soak.record.recipe import Recipe
from soak.record.redact import Redactor
from soak.record.redact_patterns import SECRET_MARK, scrub_secrets, secret_name
from soak.safe_text import safe_line

MAX_VALUE = 200
"""Longest stated value kept (characters); a longer one is cut and ends with ``…``."""
CONFIG_TIMEOUT_S = 10.0
"""Longest wait for an engine's configuration endpoint: vLLM's ``/server_info`` collects
its system environment (``pip``, ``nvidia-smi``, …) on its first call, 1–4 s on a busy
host; a hung one costs this once (the endpoints are probed together), before anything
starts."""
MAX_SERVER_CMD_BYTES = 64 * 1024
"""Largest ``--server-cmd-file`` (a launch command, not a log)."""

Facts = dict[str, str]


def stated_value(value: Any) -> str | None:
    """A JSON scalar as bounded, printable text (None: null, a container, not finite)."""
    if isinstance(value, bool):
        text = str(value)  # "True"/"False", as vllm:cache_config_info labels say it
    elif isinstance(value, int):
        text = str(value) if value.bit_length() <= 200 else f"<{value.bit_length()}-bit number>"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = str(value)
    elif isinstance(value, str):
        text = value[: MAX_VALUE * 2]  # escape a bounded prefix, never a megabyte
    else:
        return None
    text = safe_line(text).strip()
    if not text or text in ("None", "null"):
        return None
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _table(doc: Any, key: str) -> Mapping[str, Any]:
    got = doc.get(key) if isinstance(doc, Mapping) else None
    return got if isinstance(got, Mapping) else {}


def _put(out: Facts, key: str, table: Mapping[str, Any], field: str) -> None:
    if (v := stated_value(table.get(field))) is not None:
        out[key] = v


def _dtype(out: Facts) -> None:
    """``torch.bfloat16`` (vLLM and TGI serialise the torch dtype) reads ``bfloat16``."""
    if "dtype" in out:
        out["dtype"] = out["dtype"].removeprefix("torch.")


def _whole(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return value if ok and 0 <= value < 2**63 else None


def _speculative(method: Any, k: Any) -> str | None:
    """``mtp k3``: the method and the draft tokens per step, what a header can show."""
    name, steps = stated_value(method), _whole(k)
    if name is None and steps is None:
        return None
    return " ".join(p for p in (name, f"k{steps}" if steps is not None else None) if p)


def vllm_facts(doc: Any) -> Facts:
    """vLLM's ``/server_info?config_format=json`` answer → canonical facts."""
    vc = _table(doc, "vllm_config")
    mc, cc = _table(vc, "model_config"), _table(vc, "cache_config")
    sc, pc = _table(vc, "scheduler_config"), _table(vc, "parallel_config")
    out: Facts = {}
    for key, table, field in (
        ("model_root", mc, "model"),
        ("revision", mc, "revision"),
        ("max_model_len", mc, "max_model_len"),
        ("dtype", mc, "dtype"),
        ("quantization", mc, "quantization"),
        ("kv_cache_dtype", cc, "cache_dtype"),
        ("gpu_memory_utilization", cc, "gpu_memory_utilization"),
        ("prefix_caching", cc, "enable_prefix_caching"),
        ("block_size", cc, "block_size"),
        ("max_num_seqs", sc, "max_num_seqs"),
        ("max_num_batched_tokens", sc, "max_num_batched_tokens"),
        ("chunked_prefill", sc, "enable_chunked_prefill"),
        ("tensor_parallel_size", pc, "tensor_parallel_size"),
        ("pipeline_parallel_size", pc, "pipeline_parallel_size"),
        ("data_parallel_size", pc, "data_parallel_size"),
    ):
        _put(out, key, table, field)
    _dtype(out)
    blocks, size = _whole(cc.get("num_gpu_blocks")), _whole(cc.get("block_size"))
    if blocks is not None and size is not None:
        out["token_slots"] = str(blocks * size)
    spec = _table(vc, "speculative_config")
    method = spec.get("method") or ("draft_model" if spec.get("model") else None)
    if spec and (words := _speculative(method, spec.get("num_speculative_tokens"))):
        out["speculative"] = words
    return out


def sglang_facts(doc: Any) -> Facts:
    """SGLang's ``/get_server_info`` answer (flat server arguments) → canonical facts."""
    d = doc if isinstance(doc, Mapping) else {}
    out: Facts = {}
    for key, field in (
        ("version", "version"),
        ("model_root", "model_path"),
        ("revision", "revision"),
        ("max_model_len", "context_length"),
        ("dtype", "dtype"),
        ("quantization", "quantization"),
        ("kv_cache_dtype", "kv_cache_dtype"),
        ("gpu_memory_utilization", "mem_fraction_static"),
        ("max_num_seqs", "max_running_requests"),
        ("tensor_parallel_size", "tp_size"),
        ("pipeline_parallel_size", "pp_size"),
        ("data_parallel_size", "dp_size"),
        ("chunked_prefill_size", "chunked_prefill_size"),
        ("token_slots", "max_total_num_tokens"),
    ):
        _put(out, key, d, field)
    if isinstance(radix := d.get("disable_radix_cache"), bool):
        out["prefix_caching"] = str(not radix)
    chunk = d.get("chunked_prefill_size")
    if isinstance(chunk, int) and not isinstance(chunk, bool) and abs(chunk) < 2**63:
        out["chunked_prefill"] = str(chunk > 0)  # -1 (or 0): chunked prefill off
    if words := _speculative(d.get("speculative_algorithm"), d.get("speculative_num_draft_tokens")):
        out["speculative"] = words
    return out


def tgi_facts(doc: Any) -> Facts:
    """TGI's ``/info`` answer → canonical facts."""
    d = doc if isinstance(doc, Mapping) else {}
    out: Facts = {}
    for key, field in (
        ("version", "version"),
        ("model_root", "model_id"),
        ("revision", "model_sha"),
        ("dtype", "model_dtype"),
        ("max_num_seqs", "max_concurrent_requests"),
        ("max_model_len", "max_total_tokens"),
        ("token_slots", "max_batch_total_tokens"),
    ):
        _put(out, key, d, field)
    _dtype(out)
    return out


def llamacpp_facts(doc: Any) -> Facts:
    """llama.cpp's ``/props`` answer → canonical facts (``n_ctx`` is per slot)."""
    d = doc if isinstance(doc, Mapping) else {}
    out: Facts = {}
    _put(out, "version", d, "build_info")
    _put(out, "model_root", d, "model_path")
    _put(out, "max_num_seqs", d, "total_slots")
    _put(out, "max_model_len", _table(d, "default_generation_settings"), "n_ctx")
    return out


_ASKED: dict[str, tuple[tuple[str, str, Callable[[Any], Facts]], ...]] = {
    "vllm": (("/server_info?config_format=json", "/server_info", vllm_facts),),
    "sglang": (
        ("/get_server_info", "/get_server_info", sglang_facts),
        ("/server_info", "/server_info", sglang_facts),  # the newer name
    ),
    "tgi": (("/info", "/info", tgi_facts),),
    "llamacpp": (("/props", "/props", llamacpp_facts),),
}
"""Engine → ``(path asked, source name, mapping)``; the first that answers is used."""


def engine_key(name: str | None) -> str | None:
    """``--engine``'s or the detected name as a key of the table above (``llama.cpp``,
    ``vLLM``, ``text-generation-inference`` read as the engines they are)."""
    if not name:
        return None
    low = "".join(c for c in name.lower() if c.isalnum())
    aliases = {"textgenerationinference": "tgi", "llamaserver": "llamacpp"}
    return aliases.get(low, low)


async def _get_json(client: httpx.AsyncClient, url: str, timeout_s: float) -> Any:
    """The JSON an endpoint answers, or None (not 200, over the cap, not JSON, no answer)."""
    try:
        page = await asyncio.wait_for(get_page(client, url), timeout_s)
    except (httpx.HTTPError, OSError, TimeoutError, ValueError):
        return None
    if not isinstance(page, bytes):
        return None  # "HTTP 404" (vLLM without dev mode), over the cap, an encoding
    try:
        return orjson.loads(page)
    except orjson.JSONDecodeError:  # also nesting deeper than orjson's limit
        return None


async def probe_stated(
    client: httpx.AsyncClient,
    base: str,
    ident: EndpointIdentity,
    engine: str | None,
    timeout_s: float = CONFIG_TIMEOUT_S,
) -> None:
    """Ask the engine's configuration endpoint and add what it states to
    ``ident.recipe`` (over what ``/metrics`` stated) and ``ident.recipe_sources``."""
    for path, source, mapping in _ASKED.get(engine_key(engine or ident.engine) or "", ()):
        doc = await _get_json(client, f"{base}{path}", timeout_s)
        if doc is None:
            continue
        facts = mapping(doc)
        if facts:
            ident.recipe.update(facts)
            ident.recipe_sources.append(source)
            if ident.version is None and "version" in facts:
                ident.version = facts["version"]  # TGI, SGLang, llama.cpp: no /version
        return


# --- declared -----------------------------------------------------------------------------


def read_server_cmd(path: Path) -> str:
    """The launch command in ``path``, credentials scrubbed. ValueError (ending a sentence
    that names the file) when it cannot be used: missing, unreadable, too big, not text."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SERVER_CMD_BYTES + 1)
    except IsADirectoryError:
        raise ValueError("is a directory, not a file") from None
    except FileNotFoundError:
        raise ValueError("does not exist") from None
    except OSError as e:
        raise ValueError(f"cannot be read: {e.strerror or e}") from None
    except ValueError as e:  # a NUL inside the path
        raise ValueError(f"is not a usable path ({e})") from None
    if len(raw) > MAX_SERVER_CMD_BYTES:
        raise ValueError(
            f"is over {MAX_SERVER_CMD_BYTES // 1024} KiB: give the launch command, not a log"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"is not UTF-8 text (byte {e.start})") from None
    return scrub_secrets(text.replace("\x00", "").strip())


@functools.lru_cache(maxsize=8)
def _server_cmd_at_start(path: Path) -> str | None:
    """Read once per runner: the identity is built twice (before the load and in the
    record), and both must say what the file said when the run started."""
    try:
        return read_server_cmd(path)
    except ValueError:
        return None  # gone since the CLI checked it: the record has no command


def declared_recipe(
    declared: Mapping[str, str], server_cmd_file: Path | None, red: Redactor
) -> Recipe:
    """``identity.recipe``: the operator's facts and the scrubbed launch command, through
    the run's redactor (``--redact`` pseudonymises paths and hosts in the command, as in
    every other string); the hash is of the command as stored."""
    facts = {
        k: SECRET_MARK if secret_name(k) else red.text(scrub_secrets(v))
        for k, v in declared.items()
    }
    cmd = _server_cmd_at_start(server_cmd_file) if server_cmd_file is not None else None
    if cmd is None:
        return Recipe(declared=facts)
    stored = red.file_text(cmd)
    sha = hashlib.sha256(stored.encode("utf-8", "surrogatepass")).hexdigest()
    return Recipe(declared=facts, server_cmd=stored, server_cmd_sha256=sha)
