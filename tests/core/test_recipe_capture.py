"""Recipe capture (issue 15 §1): what the servers state, what the operator declares.

Stated facts: the simulated engine as a real process on loopback (two recipes that
differ in slots and memory target; one that answers ``/server_info`` with 404 as
production vLLM does), the engines' configuration answers as fixtures (vLLM's is a real
capture of the 0.32 CPU build in dev mode; SGLang's, TGI's and llama.cpp's are built
from their source's field names), and hostile answers over real HTTP. Declared facts:
``--recipe``, ``[recipe]`` and ``--server-cmd-file``, parsed and refused in words; a
credential in the launch command never reaches any file of the run directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from soak.cli.demo import simulated_engine
from soak.cli.parser import build_parser, cli_values
from soak.record.models import EndpointIdentity, Identity
from soak.record.recipe import differing_facts, endpoint_facts, recipe_facts
from soak.record.redact import Redactor
from soak.record.redact_patterns import scrub_secrets, secret_name
from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.identity import probe_all
from soak.run.recipe_probe import (
    MAX_VALUE,
    declared_recipe,
    llamacpp_facts,
    probe_stated,
    sglang_facts,
    stated_value,
    tgi_facts,
    vllm_facts,
)
from tests.hostile_server import HOSTILE, good_stream, hostile_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny", "gates": [], "nvml": False}


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _identity(endpoints: list[Any]) -> Identity:
    return Identity(
        model="tiny-sim",
        model_served=True,
        engine="vllm",
        endpoints=endpoints,
        config_sha256="0" * 64,
        soaktop_version="test",
    )


def _probe(urls: list[str], engine: str | None = None) -> list[Any]:
    return asyncio.run(probe_all(urls, {}, 10.0, engine))


# --- stated: the simulated engine, a real process --------------------------------------


def test_two_recipes_differ_exactly_in_slots_and_memory() -> None:
    facts = []
    for seqs, mem in (("32", "0.95"), ("64", "0.9")):
        args = ["--max-num-seqs", seqs, "--gpu-memory-utilization", mem]
        with simulated_engine(replicas=1, gpus_per_replica=2, extra_args=args) as sim:
            eps = _probe(sim.urls)
        assert eps[0].recipe_sources == ["/metrics vllm:cache_config_info", "/server_info"]
        assert eps[0].recipe["max_num_seqs"] == seqs
        assert eps[0].recipe["tensor_parallel_size"] == "2"
        facts.append(recipe_facts(_identity(eps)))
    assert differing_facts(facts) == ["max_num_seqs", "gpu_memory_utilization"]
    assert facts[0]["gpu_memory_utilization"] == "0.95"
    assert facts[1]["gpu_memory_utilization"] == "0.9"
    for f in facts:  # what the server states beyond /metrics, the same in both
        assert f["model_root"] == "tiny-sim" and f["max_model_len"] == "8192"
        assert f["token_slots"] == str(16384 * 16) and f["version"] == "0.32.0"


def test_production_vllm_without_server_info_still_states_its_cache_config() -> None:
    args = ["--no-server-info", "--gpu-memory-utilization", "0.8"]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=args) as sim:
        eps = _probe(sim.urls)
    (ep,) = eps
    assert ep.error is None and ep.engine == "vllm"
    assert ep.recipe_sources == ["/metrics vllm:cache_config_info"]
    facts = endpoint_facts(ep)
    assert facts["gpu_memory_utilization"] == "0.8"
    assert facts["token_slots"] == str(16384 * 16)
    assert facts["model_root"] == "tiny-sim"  # /v1/models' root
    assert "max_num_seqs" not in facts  # only /server_info says it


# --- stated: each engine's answer -------------------------------------------------------


def test_vllm_server_info_of_the_real_cpu_build() -> None:
    doc = _fixture("recipe_vllm_0.32_server_info.json")
    assert vllm_facts(doc) == {
        "model_root": "/root/.cache/soaktop/tiny-model-v1",
        "max_model_len": "2048",
        "dtype": "float32",  # "torch.float32" as vLLM serialises it
        "kv_cache_dtype": "auto",
        "gpu_memory_utilization": "0.92",
        "prefix_caching": "True",
        "block_size": "128",
        "max_num_seqs": "8",
        "max_num_batched_tokens": "2048",
        "chunked_prefill": "True",
        "tensor_parallel_size": "1",
        "pipeline_parallel_size": "1",
        "data_parallel_size": "1",
        "token_slots": str(8192 * 128),  # num_gpu_blocks × block_size
    }


def test_vllm_speculative_config_reads_method_and_k() -> None:
    doc = {"vllm_config": {"speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}}
    assert vllm_facts(doc) == {"speculative": "mtp k3"}
    doc = {"vllm_config": {"speculative_config": {"model": "/d", "num_speculative_tokens": 5}}}
    assert vllm_facts(doc) == {"speculative": "draft_model k5"}
    assert vllm_facts({"vllm_config": {"speculative_config": None}}) == {}


def test_vllm_environment_sections_are_never_kept() -> None:
    doc = _fixture("recipe_vllm_0.32_server_info.json") | {
        "vllm_env": {"VLLM_HOST_IP": "10.1.2.3", "HF_TOKEN": "hf_secret"},
        "system_env": {"pip_packages": "torch==2.9"},
    }
    doc["vllm_config"]["model_config"]["hf_token"] = "hf_never_kept_0123456789abcdef"
    text = json.dumps(vllm_facts(doc))
    assert "10.1.2.3" not in text and "hf_" not in text and "torch==" not in text


def test_sglang_server_info() -> None:
    facts = sglang_facts(_fixture("recipe_sglang_get_server_info.json"))
    assert facts == {
        "version": "0.5.3",
        "model_root": "meta-llama/Llama-3.1-8B-Instruct",
        "revision": "0e9e39f249a16976918f6564b8830bc894c89659",
        "max_model_len": "32768",
        "dtype": "auto",
        "quantization": "fp8",
        "kv_cache_dtype": "fp8_e5m2",
        "gpu_memory_utilization": "0.88",
        "max_num_seqs": "64",
        "tensor_parallel_size": "2",
        "pipeline_parallel_size": "1",
        "data_parallel_size": "2",
        "chunked_prefill_size": "8192",
        "token_slots": "412345",
        "prefix_caching": "True",  # disable_radix_cache false
        "chunked_prefill": "True",
        "speculative": "EAGLE k4",
    }
    assert "sk-sglang" not in json.dumps(facts)
    off = sglang_facts({"disable_radix_cache": True, "chunked_prefill_size": -1})
    assert off == {
        "prefix_caching": "False",
        "chunked_prefill": "False",
        "chunked_prefill_size": "-1",
    }


def test_tgi_info() -> None:
    assert tgi_facts(_fixture("recipe_tgi_info.json")) == {
        "version": "2.4.1",
        "model_root": "bigscience/bloom-560m",
        "revision": "e985a63cdc139290c5f700ff1929f0b5942cced2",
        "dtype": "float16",
        "max_num_seqs": "128",
        "max_model_len": "2048",
        "token_slots": "32000",
    }


def test_llamacpp_props() -> None:
    # a real llama-server's /props (tests/real_engine/llama_capture.py), -np 2 -c 4096
    assert llamacpp_facts(_fixture("recipe_llamacpp_props.json")) == {
        "version": "b0-unknown",
        "model_root": "/root/.cache/soaktop/tiny-gguf-v1/tiny.gguf",
        "max_num_seqs": "2",
        "max_model_len": "2048",
    }


@pytest.mark.parametrize("mapping", [vllm_facts, sglang_facts, tgi_facts, llamacpp_facts])
def test_hostile_answers_never_raise_and_never_land_as_they_are(mapping: Any) -> None:
    huge = "x" * 10_000_000
    garbage: list[Any] = [
        None,
        [1, 2, 3],
        "a string",
        42,
        {"vllm_config": "text format"},
        {"vllm_config": {"model_config": [1], "cache_config": 7, "scheduler_config": None}},
    ]
    for doc in garbage:
        assert mapping(doc) == {}, doc
    wild: dict[str, Any] = {
        "max_num_seqs": {"nested": {"deeper": [1, {"x": 2}]}},
        "max_running_requests": [64],
        "total_slots": 10**400,
        "max_concurrent_requests": float("nan"),
        "tp_size": True,
        "model": huge,
        "model_path": huge,
        "model_id": huge,
        "dtype": HOSTILE,
        "version": f"0.5{HOSTILE}",
        "build_info": "b1\nINFO: fake log line",
        "default_generation_settings": {"n_ctx": {"a": 1}},
        "disable_radix_cache": "yes",
        "speculative_algorithm": {"x": 1},
    }
    nested = {"vllm_config": {k: wild for k in ("model_config", "cache_config")}} | wild
    for doc in (wild, nested):
        facts = mapping(doc)
        for key, value in facts.items():
            assert isinstance(value, str) and len(value) <= MAX_VALUE, key
            assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in value), (key, value)
        if "model_root" in facts:
            assert facts["model_root"].endswith("…")


def test_stated_value_bounds() -> None:
    assert stated_value(0.95) == "0.95"
    assert stated_value(True) == "True"
    assert stated_value(None) is None and stated_value({"a": 1}) is None
    assert stated_value(float("inf")) is None
    assert stated_value("None") is None  # cache_config_info's unset
    assert stated_value(2**300) == "<301-bit number>"
    assert stated_value("\x1b[2Jcleared") == "\\x1b[2Jcleared"
    assert len(stated_value("y" * 1000) or "") == MAX_VALUE


def test_hostile_engine_endpoints_over_http() -> None:
    """Over real HTTP: a 404, a page over the size cap, JSON nested past any parser's
    limit, HTML, a hung endpoint: each leaves the identity without those facts, never
    an error."""
    routes: dict[str, Any] = {
        "/metrics": {"text": "# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n"},
        "/info": {"text": "[" * 100_000 + "]" * 100_000},
    }
    with hostile_server({"routes": routes}) as url:
        (ep,) = _probe([url])
        assert ep.engine == "tgi" and ep.error is None
        assert ep.recipe == {} and ep.recipe_sources == []
    for spec in (
        {"status": 404, "json": {"detail": "Not Found"}},
        {"text": "<html>oops</html>"},
        {"text": '{"model_id": "' + "m" * 9_000_000 + '"}'},  # over the 8 MiB cap
    ):
        with hostile_server({"routes": {"/info": spec}}) as url:
            (ep,) = _probe([url], engine="tgi")  # --engine: asked without /metrics
            assert ep.reachable and ep.recipe == {} and ep.recipe_sources == [], spec
    hung = {"/info": {"hang_s": 5, "json": {"max_concurrent_requests": 1}}}
    with hostile_server({"routes": hung}) as url:
        ep = EndpointIdentity(url=url, reachable=True)

        async def ask() -> None:
            async with httpx.AsyncClient() as client:
                await probe_stated(client, url, ep, "tgi", timeout_s=0.5)

        asyncio.run(ask())
        assert ep.recipe == {} and ep.recipe_sources == []
    answer = {"json": {"model_id": "m" * 1_000_000, "max_concurrent_requests": 7, "x": HOSTILE}}
    with hostile_server({"routes": {"/info": answer}}) as url:
        (ep,) = _probe([url], engine="text-generation-inference")
    assert ep.recipe_sources == ["/info"]
    assert ep.recipe["max_num_seqs"] == "7" and len(ep.recipe["model_root"]) == MAX_VALUE


def test_sglang_slots_from_metrics_and_server_info_fallback() -> None:
    metrics = (FIXTURES / "sglang_metrics.txt").read_text()
    routes = {
        "/metrics": {"text": metrics},
        "/server_info": {"json": {"max_running_requests": 48, "tp_size": 4}},
    }
    with hostile_server({"routes": routes}) as url:  # no /get_server_info: the newer name
        (ep,) = _probe([url])
    assert ep.engine == "sglang"
    assert ep.recipe_sources == ["/metrics sglang:max_total_num_tokens", "/server_info"]
    assert ep.recipe == {"token_slots": "412345", "max_num_seqs": "48", "tensor_parallel_size": "4"}


# --- declared -----------------------------------------------------------------------------


def _parse(*argv: str) -> dict[str, Any]:
    ns = build_parser().parse_args(["run", "--endpoint", "http://127.0.0.1:8000", *argv])
    return {k: v for k, v in cli_values(ns).items() if v is not None}


def test_recipe_flags_merge_over_the_config_files_table(tmp_path: Path) -> None:
    toml = tmp_path / "soak.toml"
    toml.write_text(
        '[run]\nmodel = "tiny"\nnvml = false\ngates = []\n'
        '[recipe]\nimage = "vllm/vllm-openai:v0.32.0"\ntensor_parallel_size = 4\n'
        'revision = "old"\nfp8 = true\n'
    )
    cli = _parse("--recipe", "revision=abc123", "--recipe", "note=KV fp8, TP4 = yes")
    cfg = load_config(cli, toml_path=toml, environ={})
    assert cfg.recipe == {
        "image": "vllm/vllm-openai:v0.32.0",
        "tensor_parallel_size": "4",
        "revision": "abc123",  # the flag's, over the file's
        "fp8": "true",
        "note": "KV fp8, TP4 = yes",
    }
    env = {"SOAKTOP_RECIPE": "image=mine;kv=fp8"}
    cfg = load_config({}, toml_path=toml, environ=env, base=BASE)
    assert cfg.recipe["image"] == "mine" and cfg.recipe["kv"] == "fp8"
    assert cfg.recipe["revision"] == "old"


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ("novalue", "expected KEY=VALUE"),
        ("Bad=1", "use lower case letters"),
        ("=1", "use lower case letters"),
        ("k=", "has an empty value"),
        ("k=" + "v" * 501, "at most 500"),
    ],
)
def test_recipe_flag_errors_name_the_item(item: str, words: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parse("--recipe", item)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--recipe" in err and words in err, err


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"Bad Key": "x"}, "recipe key 'Bad Key'"),
        ({"k": ["a"]}, "list is not allowed"),
        ({"k": {"a": 1}}, "dict is not allowed"),
        ({"k": "two\nlines"}, "without control characters"),
        ({"k": 10**100}, "int is not allowed"),
    ],
)
def test_recipe_table_errors(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({}, base=BASE | {"recipe": table}, environ={})
    assert words in str(err.value) and "recipe" in str(err.value)


def test_an_unreadable_server_cmd_file_is_a_usage_error(tmp_path: Path) -> None:
    for path, words in (
        (tmp_path / "missing.sh", "does not exist"),
        (tmp_path, "is a directory"),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(_parse("--server-cmd-file", str(path)), base=BASE, environ={})
        assert "server command file" in str(err.value) and words in str(err.value)
    big = tmp_path / "big.sh"
    big.write_text("x" * 70_000)
    binary = tmp_path / "bin.sh"
    binary.write_bytes(b"\xff\xfe\x00")
    for path, words in ((big, "over 64 KiB"), (binary, "not UTF-8")):
        with pytest.raises(ConfigError, match=words):
            load_config({"server_cmd_file": path}, base=BASE, environ={})


SECRETS = [
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "sk-vllm-launch-7f3a9c1d5b2e8f40",
    "tokenvalue-in-bearer-8a7b6c",
    "hunter2-password-9",
    "aws-secret-0f9e8d7c",
    "yaml-api-key-55aa",
]
COMMAND = f"""#!/bin/sh
HF_TOKEN={SECRETS[0]} AWS_SECRET_ACCESS_KEY={SECRETS[4]} \\
vllm serve /srv/models/llama --tensor-parallel-size 4 --max-num-seqs 32 \\
  --api-key {SECRETS[1]} --max-num-batched-tokens 8192 \\
  --gpu-memory-utilization 0.95
curl -H "Authorization: Bearer {SECRETS[2]}" http://admin:{SECRETS[3]}@127.0.0.1:8000/v1/models
# compose: api-key: {SECRETS[5]}
"""


def test_secrets_in_the_launch_command_are_scrubbed() -> None:
    clean = scrub_secrets(COMMAND)
    for secret in SECRETS:
        assert secret not in clean, secret
    for kept in ("--tensor-parallel-size 4", "--max-num-seqs 32", "--max-num-batched-tokens 8192"):
        assert kept in clean
    assert clean.count("<secret>") == 6
    assert scrub_secrets("--api-key $VLLM_API_KEY") == "--api-key $VLLM_API_KEY"
    assert secret_name("HF_TOKEN") and secret_name("--api-key") and secret_name("DB_PASSWORD2")
    assert not secret_name("--max-num-batched-tokens") and not secret_name("--tokenizer")
    assert not secret_name("--ssl-keyfile")


def test_declared_recipe_hashes_the_command_as_stored(tmp_path: Path) -> None:
    cmd = tmp_path / "launch.sh"
    cmd.write_text(COMMAND)
    recipe = declared_recipe({"revision": "abc", "hf_token": "x"}, cmd, Redactor([], False))
    assert recipe.declared == {"revision": "abc", "hf_token": "<secret>"}
    assert recipe.server_cmd is not None and "<secret>" in recipe.server_cmd
    assert recipe.server_cmd_sha256 == hashlib.sha256(recipe.server_cmd.encode()).hexdigest()
    twin = tmp_path / "launch-again.sh"
    twin.write_text(COMMAND.replace(SECRETS[1], "sk-another-key-0000111122223333"))
    again = declared_recipe({}, twin, Redactor([], False))
    assert again.server_cmd_sha256 == recipe.server_cmd_sha256  # launched alike, hashed alike
    other = tmp_path / "launch-other.sh"
    other.write_text(COMMAND.replace("--max-num-seqs 32", "--max-num-seqs 64"))
    assert (
        declared_recipe({}, other, Redactor([], False)).server_cmd_sha256 != again.server_cmd_sha256
    )


def test_sampling_fields_are_bounded_and_become_body_fields() -> None:
    cli = _parse(
        "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05",
        "--presence-penalty", "0.5", "--frequency-penalty", "-0.5",
        "--repetition-penalty", "1.1",
    )  # fmt: skip
    cfg = load_config(cli, base=BASE, environ={})
    assert cfg.sampling_extra() == (
        ("top_p", 0.9),
        ("top_k", 40),
        ("min_p", 0.05),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -0.5),
        ("repetition_penalty", 1.1),
    )
    assert RunConfig.model_validate(BASE).sampling_extra() == ()
    for flag, bad in (("--top-p", "0"), ("--top-k", "-2"), ("--min-p", "1.5"),
                      ("--presence-penalty", "3"), ("--repetition-penalty", "0"),
                      ("--temperature", "2.5")):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            load_config(_parse(flag, bad), base=BASE, environ={}, cli_flags={})
        assert "allowed:" in str(err.value), (flag, str(err.value))


# --- a whole run: what reaches the server, what reaches the disk -------------------------

KEY = "sk-c0ffee1234567890abcdef"
"""The run's own API key (--api-key-env): the redactor's secret, as before."""
DECLARED_SECRET = "hf_DeclaredByMistake0123456789abcdef"
ENV_SECRET = "never-kept-env-value-31415"


@contextlib.contextmanager
def recording_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A small vLLM-shaped server in a thread that keeps every load request's body and
    answers ``/server_info`` with a configuration and an environment that holds a secret."""
    bodies: list[dict[str, Any]] = []
    info = _fixture("recipe_vllm_0.32_server_info.json") | {
        "vllm_env": {"VLLM_SECRET_THING": ENV_SECRET},
        "system_env": {"hostname": ENV_SECRET},
    }

    async def models(request: web.Request) -> web.Response:
        card = {"id": "rec", "object": "model", "root": "/srv/models/rec", "max_model_len": 4096}
        return web.json_response({"object": "list", "data": [card]})

    async def chat(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in good_stream("rec"):
            await resp.write(piece.encode())
        await resp.write_eof()
        return resp

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def server_info(request: web.Request) -> web.Response:
        return web.json_response(info)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/server_info", server_info)
    app.router.add_post("/v1/chat/completions", chat)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", bodies
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redact"])
def test_a_run_records_the_recipe_and_no_secret_reaches_the_disk(
    tmp_path: Path, redact: bool
) -> None:
    cmd = tmp_path / "launch.sh"
    cmd.write_text(COMMAND)
    toml = tmp_path / "soak.toml"
    toml.write_text('[recipe]\nimage = "vllm/vllm-openai:v0.32.0"\n')
    out = tmp_path / "runs"
    with recording_server() as (url, bodies):
        argv = [
            sys.executable, "-m", "soak", "run", "--endpoint", url, "--model", "rec",
            "--engine", "vllm", "--max-requests", "6", "--concurrency", "2", "--no-gates",
            "--no-nvml", "--headless", "--interval", "1", "--out", str(out),
            "--config", str(toml), "--api-key-env", "SOAK_RECIPE_TEST_KEY",
            "--server-cmd-file", str(cmd), "--canary-interval", "0",
            "--recipe", "revision=abc123", "--recipe", "checkpoint=/srv/models/private-ckpt",
            "--recipe", f"hf_token={DECLARED_SECRET}",
            "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05",
            "--presence-penalty", "0.5", "--frequency-penalty", "-0.5",
            "--repetition-penalty", "1.1", "--reasoning", "high",
            *(["--redact"] if redact else []),
        ]  # fmt: skip
        env = os.environ | {"SOAK_RECIPE_TEST_KEY": KEY, "PYTHONUNBUFFERED": "1"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    # Every load request carries the sampling fields, never a seed.
    assert len(bodies) == 6
    for body in bodies:
        assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["top_k"] == 40
        assert body["min_p"] == 0.05 and body["repetition_penalty"] == 1.1
        assert body["presence_penalty"] == 0.5 and body["frequency_penalty"] == -0.5
        assert body["reasoning_effort"] == "high"  # a soak sends it as a matrix does
        assert "seed" not in body
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    rec = json.loads((run_dir / "record.json").read_text())
    assert rec["config"]["top_k"] == 40 and rec["config"]["repetition_penalty"] == 1.1
    ident = rec["identity"]
    assert ident == json.loads((run_dir / "identity.json").read_text())
    (ep,) = ident["endpoints"]
    assert ep["recipe_sources"] == ["/server_info"]
    assert ep["recipe"]["max_num_seqs"] == "8" and ep["recipe"]["token_slots"] == "1048576"
    declared = ident["recipe"]["declared"]
    assert declared["revision"] == "abc123" and declared["image"] == "vllm/vllm-openai:v0.32.0"
    assert declared["hf_token"] == "<secret>"
    stored = ident["recipe"]["server_cmd"]
    assert "--max-num-seqs 32" in stored and stored.count("<secret>") == 6
    assert ident["recipe"]["server_cmd_sha256"] == hashlib.sha256(stored.encode()).hexdigest()
    if redact:  # a path is private: declared or in the command, it is a pseudonym
        assert declared["checkpoint"].startswith("path-")
        assert "/srv/models" not in stored
    else:
        assert declared["checkpoint"] == "/srv/models/private-ckpt"
    # No secret in any file of the run directory (config.json, identity.json, record.json,
    # runner.log, journals, summaries): raw, and in JSON-escaped form.
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"config.json", "identity.json", "record.json", "runner.log"} <= {p.name for p in files}
    for path in files:
        data = path.read_bytes()
        for secret in [*SECRETS, KEY, DECLARED_SECRET, ENV_SECRET]:
            assert secret.encode() not in data, (path.name, secret)
        if redact:
            assert b"private-ckpt" not in data, path.name


# --- properties: hostile bytes -------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=30), inner),
    max_leaves=30,
)
FIELDS_ASKED = sorted(
    {
        *("model_config", "cache_config", "scheduler_config", "parallel_config"),
        *("speculative_config", "max_running_requests", "tp_size", "model_path", "version"),
        *("model_id", "max_concurrent_requests", "total_slots", "default_generation_settings"),
        *("disable_radix_cache", "chunked_prefill_size", "speculative_algorithm", "model"),
    }
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    doc=st.dictionaries(st.sampled_from(FIELDS_ASKED), json_values, max_size=8),
    wrap=st.booleans(),
)
def test_any_answer_maps_to_bounded_one_line_facts(doc: dict[str, Any], wrap: bool) -> None:
    answer = {"vllm_config": doc} if wrap else doc
    for mapping in (vllm_facts, sglang_facts, tgi_facts, llamacpp_facts):
        for key, value in mapping(answer).items():
            assert isinstance(value, str) and 0 < len(value) <= MAX_VALUE, key
            assert not [c for c in value if _never_shown(c)], (key, value)
            assert "\n" not in value and "\x1b" not in value, (key, value)


def _never_shown(ch: str) -> bool:
    """A character a terminal must never receive raw: a control (C0, DEL, C1), a
    surrogate, a line or paragraph separator, a bidi control, a zero-width mark or a tag
    character. An unassigned code point is none of these: Python's ``isprintable`` calls
    it unprintable only because its Unicode tables are older than the text."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) in {"Cc", "Cs", "Zl", "Zp"}
        or cp == 0x061C
        or 0x200B <= cp <= 0x200F
        or 0x202A <= cp <= 0x202E
        or 0x2066 <= cp <= 0x2069
        or cp == 0xFEFF
        or 0xE0000 <= cp <= 0xE007F
    )


secret_tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789_", min_size=8)
filler = st.text(alphabet=" abcdefxyz-=:/.0123456789\n", max_size=40)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    secret=secret_tokens.filter(lambda s: not s.startswith("_")),
    form=st.sampled_from(
        [
            "--api-key {}",
            "--api-key={}",
            "--hf-token '{}'",
            "HF_TOKEN={}",
            'OPENAI_API_KEY="{}"',
            "-e VLLM_API_KEY={}",
            "DB_PASSWORD={}",
            "-H 'Authorization: Bearer {}'",
            "https://user:{}@host:8000/v1",
            '{{"api_key": "{}"}}',
            "--api-key \\\n    {}",
        ]
    ),
    before=filler,
    after=filler,
)
def test_a_secret_in_any_command_is_scrubbed(
    secret: str, form: str, before: str, after: str
) -> None:
    assume(secret not in f"{before} {after}")  # the filler itself is not a secret
    text = f"vllm serve m {before} {form.format(secret)} {after} --port 8000"
    assert secret not in scrub_secrets(text), text
