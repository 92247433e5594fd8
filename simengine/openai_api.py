"""The OpenAI-compatible routes of one replica, as vLLM's API server answers them."""

from __future__ import annotations

import random
import time
import uuid
from collections import abc
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from simengine import wire
from simengine.config import SimConfig
from simengine.endurance import Endurance
from simengine.faults import CONTRACT_ACTIONS, FaultBook, FaultRule
from simengine.metrics import EngineMetrics
from simengine.prefix_cache import prompt_tokens
from simengine.responses import ResponsesTemplate, chat_body, response_body
from simengine.scheduler import Scheduler
from simengine.sequence import Sequence
from simengine.simlog import ReplicaLog
from simengine.textgen import K_CONTENT, K_REASONING, K_TOOL_HEAD, Plan, build_plan
from simengine.tokenizer import chat_token_ids, token_ids
from simengine.validate import (
    ApiError,
    ParsedRequest,
    check_model,
    parse_chat,
    parse_completion,
    parse_json,
    prompt_text,
)

_JSON = "application/json"


class ServedReplica(Protocol):
    """What the routes need of the replica they answer for (``simengine.replica.Replica``,
    which builds them: a protocol here, so this module needs nothing of that one)."""

    cfg: SimConfig
    index: int
    created: int
    alive: bool
    engine: Scheduler
    metrics: EngineMetrics
    faults: FaultBook
    endurance: Endurance | None
    log: ReplicaLog
    request_counter: int
    rejections: int

    def prefix_hit(self, tokens: abc.Sequence[str | int]) -> int:
        """Block-aligned tokens of the prompt's leading blocks already in the prefix cache."""
        ...


def json_response(obj: Any, status: int = 200) -> web.Response:
    """Compact JSON, as starlette's JSONResponse writes it."""
    return web.Response(body=orjson.dumps(obj), status=status, content_type=_JSON)


def error_response(status: int, message: str, err_type: str | None = None) -> web.Response:
    """vLLM's nested error body with its status code."""
    err_type = err_type or wire.ERROR_TYPES.get(status, "InternalServerError")
    return web.Response(
        body=wire.error_body(message, err_type, status), status=status, content_type=_JSON
    )


class OpenAIRoutes:
    """Handlers bound to one replica."""

    def __init__(self, replica: ServedReplica) -> None:
        self.rep = replica
        self.cfg = replica.cfg

    def add_to(self, app: web.Application) -> None:
        """Register every route on ``app``."""
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/health", self.health)
        app.router.add_get("/load", self.load)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        if self.cfg.server_info:
            app.router.add_get("/server_info", self.server_info)

    # -- small routes -----------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``."""
        cfg, created = self.cfg, self.rep.created
        perm = {
            "id": f"modelperm-{uuid.UUID(int=self.rep.index + 1).hex}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        card = {
            "id": cfg.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": cfg.model,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [perm],
        }
        return json_response({"object": "list", "data": [card]})

    async def version(self, request: web.Request) -> web.Response:
        """``GET /version``."""
        return json_response({"version": self.cfg.version_string})

    async def health(self, request: web.Request) -> web.Response:
        """``GET /health``: 200 with an empty body; 503 once the engine is dead."""
        return web.Response(status=200 if self.rep.alive else 503)

    async def load(self, request: web.Request) -> web.Response:
        """``GET /load``: requests inside the engine."""
        eng = self.rep.engine
        return json_response({"server_load": len(eng.running) + len(eng.waiting)})

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: this replica's Prometheus text."""
        return web.Response(
            body=self.rep.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def server_info(self, request: web.Request) -> web.Response:
        """``GET /server_info[?config_format=json]``: vLLM's dev-mode answer (only with
        ``VLLM_SERVER_DEV_MODE=1`` there): the configuration, its environment beside it."""
        fmt = request.query.get("config_format", "text")
        if fmt not in ("text", "json"):
            return error_response(400, f"config_format {fmt!r}: allowed 'text' or 'json'")
        config = vllm_config(self.cfg)
        return json_response(
            {
                "vllm_config": config if fmt == "json" else _config_text(config),
                # What real vLLM puts beside the configuration: a client must never keep it.
                "vllm_env": {"VLLM_SERVER_DEV_MODE": True, "VLLM_LOGGING_LEVEL": "INFO"},
                "system_env": {"os": "simengine", "cuda_runtime_version": None},
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """``POST /tokenize``: accepts ``prompt`` or ``messages``."""
        try:
            body = parse_json(await request.read())
            check_model(body, self.cfg)
            if "messages" in body:
                msgs = body["messages"]
                if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
                    raise ApiError(400, "messages must be a list of objects")
                ids = chat_token_ids(
                    msgs, body.get("tools") or None, bool(body.get("add_generation_prompt", True))
                )
            else:
                text, n = prompt_text(body)
                ids = token_ids(text) if text is not None else list(body["prompt"])[:n]
        except ApiError as e:
            return error_response(e.status, e.message, e.err_type)
        return json_response(
            {
                "count": len(ids),
                "max_model_len": self.cfg.max_model_len,
                "tokens": ids,
                "token_strs": None,
            }
        )

    # -- generation -------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``."""
        return await self._generate(request, chat=False)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses`` (:mod:`simengine.responses`)."""
        return await self._generate(request, chat=True, api="responses")

    async def _generate(
        self, request: web.Request, chat: bool, api: str = ""
    ) -> web.StreamResponse:
        rep, cfg = self.rep, self.cfg
        xrid = request.headers.get("X-Request-Id")
        rep.request_counter += 1
        prefix = "resp_" if api else "chatcmpl-" if chat else "cmpl-"
        rid = prefix + (xrid or uuid.uuid4().hex)
        try:
            body = parse_json(await request.read())
            if api:
                body = chat_body(body)  # the same request, as the chat route reads it
            parsed = parse_chat(body, cfg) if chat else parse_completion(body, cfg)
        except ApiError as e:
            return self._reply_error(request, xrid, e.status, e.message, e.err_type)
        if not rep.alive:
            return self._reply_error(request, xrid, 500, wire.ENGINE_DEAD_MESSAGE)
        fault = rep.faults.match_request(xrid, rep.index)
        if fault is not None and fault.action in ("http_500", "http_503"):
            status = 500 if fault.action == "http_500" else 503
            rep.log.warning("simengine.py:0", f"fault {fault.action} injected into {rid}")
            msg = "Internal server error" if status == 500 else "Service unavailable"
            return self._reply_error(request, xrid, status, msg)
        rep.log.info(
            "logger.py:49",
            f"Received request {rid}: prompt_tokens: {parsed.prompt_tokens}, "
            f"max_tokens: {parsed.out.max_tokens}, stream: {parsed.stream}",
        )
        if rep.engine.queue_full():
            return await self._reject_full(request, xrid, rid, parsed.stream, chat)
        plan, vocab_idx = self._plan(parsed, xrid, rid, fault)
        created = int(time.time())
        template, frags = self._stream_parts(parsed, plan, vocab_idx, rid, created, api)
        resp: web.StreamResponse | None = None
        if parsed.stream:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
            await resp.prepare(request)
            self._access(request, xrid, 200)
        seq = Sequence(
            rid=rid,
            plan=plan,
            prompt_tokens=parsed.prompt_tokens,
            template=template,
            transport=request.transport,
            stream=parsed.stream,
            include_usage=parsed.include_usage,
            frags=frags,
            prefix_hit=rep.prefix_hit(prompt_tokens(body, chat)),
            fault=fault,
        )
        rep.engine.submit(seq)
        await seq.done
        if resp is not None:
            # aiohttp ends the chunked body (write_eof) and ignores a client already gone.
            return resp
        if api and seq.outcome != "abort" and seq.error is None:
            n = seq.generated
            out = response_body(rid, created, cfg.model, plan, n, seq.prompt_tokens,
                                _finish(plan, n))  # fmt: skip
            self._access(request, xrid, 200)
            return web.Response(body=out, content_type=_JSON)
        return self._answer(request, xrid, seq, created, chat)

    def _stream_parts(
        self,
        parsed: ParsedRequest,
        plan: Plan,
        vocab_idx: list[int] | None,
        rid: str,
        created: int,
        api: str,
    ) -> tuple[wire.StreamTemplate | ResponsesTemplate, list[bytes] | None]:
        """The stream's template and per-token fragments (None when not streamed)."""
        if api:
            rt = ResponsesTemplate(rid, created, self.cfg.model)
            return rt, rt.frags(plan) if parsed.stream else None
        template = wire.StreamTemplate(rid, created, self.cfg.model, parsed.chat)
        frags = wire.stream_frags(plan, vocab_idx, parsed.chat) if parsed.stream else None
        return template, frags

    def _plan(
        self, parsed: ParsedRequest, xrid: str | None, rid: str, fault: FaultRule | None
    ) -> tuple[Plan, list[int] | None]:
        """The request's tokens, drawn from a seed of its id (the same id, the same answer)."""
        rep, cfg = self.rep, self.cfg
        seed_key = f"{cfg.seed}:{xrid}" if xrid else f"{cfg.seed}:#{rep.request_counter}"
        contract_fault = None
        if fault is not None and fault.action in CONTRACT_ACTIONS:
            # Decided now, in the plan: streamed and non-streamed answers break alike and
            # usage counts exactly the broken tokens that are sent.
            contract_fault = fault.action
            rep.log.warning("simengine.py:0", f"fault {fault.action} injected into {rid}")
        plan, vocab_idx = build_plan(
            parsed.out,
            random.Random(seed_key),
            mean_output_tokens=cfg.mean_output_tokens,
            reasoning_tokens=cfg.reasoning_tokens,
            tool_call_probability=cfg.tool_call_probability,
            parallel_tool_call_probability=cfg.parallel_tool_call_probability,
            contract_fault=contract_fault,
        )
        for note in plan.notes:
            rep.log.warning("structured_outputs.py:0", f"{rid}: {note}")
        if vocab_idx is not None and rep.endurance is not None and rep.endurance.garbles:
            # garbage-after: a plain-text answer (no grammar to hold it) may degenerate.
            garbled = rep.endurance.garble(parsed.out, random.Random(seed_key + ":garbage"))
            if garbled is not None:
                plan, vocab_idx = garbled
        return plan, vocab_idx

    def _answer(
        self, request: web.Request, xrid: str | None, seq: Sequence, created: int, chat: bool
    ) -> web.Response:
        """The non-streamed answer of a finished sequence (or its error)."""
        if seq.outcome == "abort":
            # The client is gone; aiohttp drops whatever is returned.
            return web.Response(status=499)
        if seq.error is not None:
            return self._reply_error(request, xrid, seq.error[1], seq.error[0])
        model, plan, n, rid = self.cfg.model, seq.plan, seq.generated, seq.rid
        if chat:
            message = _chat_message(plan, n)
            body_out = wire.chat_response(
                rid, created, model, message, _finish(plan, n), seq.prompt_tokens, n
            )
        else:
            text = "".join(plan.texts[:n])
            body_out = wire.completion_response(
                rid, created, model, text, _finish(plan, n), seq.prompt_tokens, n
            )
        if seq.malformed:
            body_out = body_out[: max(len(body_out) // 2, 8)]
        self._access(request, xrid, 200)
        return web.Response(body=body_out, content_type=_JSON)

    async def _reject_full(
        self, request: web.Request, xrid: str | None, rid: str, stream: bool, chat: bool
    ) -> web.StreamResponse:
        rep = self.rep
        rep.rejections += 1
        msg = (
            f"The engine's waiting queue is full (max_num_queued_reqs="
            f"{self.cfg.max_num_queued_reqs}); request {rid} was rejected. Retry later."
        )
        rep.log.warning("scheduler.py:0", msg)
        # vLLM answers some rejections before the response starts (HTTP 503) and others
        # after it (an error event inside a 200 stream); alternate to show both.
        if not stream or rep.rejections % 2 == 1:
            return self._reply_error(request, xrid, 503, msg)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        self._access(request, xrid, 200)
        await resp.write(b"data: " + wire.error_body(msg, "ServiceUnavailableError", 503) + b"\n\n")
        await resp.write(wire.DONE)
        await resp.write_eof()
        return resp

    def _reply_error(
        self,
        request: web.Request,
        xrid: str | None,
        status: int,
        message: str,
        err_type: str | None = None,
    ) -> web.Response:
        self._access(request, xrid, status)
        return error_response(status, message, err_type)

    def _access(self, request: web.Request, xrid: str | None, status: int) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        who = f"{peer[0]}:{peer[1]}" if peer else "-"
        phrase = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "")  # fmt: skip
        self.rep.log.info(
            "api_server.py:0",
            f'{who} - "{request.method} {request.path} HTTP/1.1" {status} {phrase} '
            f"X-Request-Id: {xrid or '-'}",
        )


def vllm_config(cfg: SimConfig) -> dict[str, Any]:
    """The sections of vLLM 0.32's ``VllmConfig`` JSON that describe a recipe, with the
    field names vLLM uses (``tests/fixtures/recipe_vllm_0.32_server_info.json`` is a real
    answer), filled from the simulated replica's settings."""
    return {
        "model_config": {
            "model": cfg.model,
            "served_model_name": cfg.model,
            "tokenizer": cfg.model,
            "dtype": "torch.bfloat16",
            "revision": None,
            "max_model_len": cfg.max_model_len,
            "quantization": None,
            "hf_token": None,
            "seed": 0,
        },
        "cache_config": {
            "block_size": cfg.block_size,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "cache_dtype": "auto",
            "enable_prefix_caching": True,
            "num_gpu_blocks": cfg.num_gpu_blocks,
            "num_cpu_blocks": None,
            "kv_cache_size_tokens": cfg.kv_token_slots,
        },
        "parallel_config": {
            "pipeline_parallel_size": 1,
            "tensor_parallel_size": cfg.gpus_per_replica,
            "data_parallel_size": 1,
            "world_size": cfg.gpus_per_replica,
        },
        "scheduler_config": {
            "runner_type": "generate",
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_queued_reqs": cfg.max_num_queued_reqs,
            "enable_chunked_prefill": True,
            "policy": "fcfs",
        },
        "speculative_config": None,
    }


def _config_text(config: dict[str, Any]) -> str:
    """``config_format=text``: vLLM's ``str(VllmConfig)``, one ``key=value`` list."""
    return ", ".join(
        f"{k}={v!r}" for section in config.values() if section for k, v in section.items()
    )


def _finish(plan: Plan, emitted: int) -> str:
    return plan.finish if emitted >= len(plan) else "length"


def _chat_message(plan: Plan, n: int) -> dict[str, Any]:
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    tidx = plan.tool_index
    for i in range(n):
        kind, text = plan.kinds[i], plan.texts[i]
        if kind == K_CONTENT:
            content.append(text)
        elif kind == K_REASONING:
            reasoning.append(text)
        elif kind == K_TOOL_HEAD:
            call = plan.tool_calls[tidx[i] if tidx else 0]
            calls.append({"id": call.id, "type": "function",
                          "function": {"name": text, "arguments": ""}})  # fmt: skip
        else:
            calls[-1]["function"]["arguments"] += text
    msg: dict[str, Any] = {"content": "".join(content) if content or not calls else None}
    if reasoning:
        msg["reasoning"] = "".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg
