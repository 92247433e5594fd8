"""One simulated vLLM server: engine, API app, metrics, GPUs, log, and how it dies."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from simengine.access import header_middleware, server_context
from simengine.config import SimConfig
from simengine.dcgm import DcgmExporter
from simengine.endurance import Endurance
from simengine.faults import FaultBook, FaultRule
from simengine.metrics import EngineMetrics
from simengine.openai_api import OpenAIRoutes
from simengine.prefix_cache import PrefixCache
from simengine.scheduler import Scheduler
from simengine.simlog import ReplicaLog


def cache_info(cfg: SimConfig) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (vLLM's CacheConfig fields, as strings)."""
    return {
        "block_size": str(cfg.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "is_attention_free": "False",
        "kv_sharing_fast_prefill": "False",
        "mamba_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(cfg.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }


class Replica:
    """A replica: its own ports, scheduler, /metrics registry, DCGM exporter and log file."""

    def __init__(
        self,
        cfg: SimConfig,
        index: int,
        faults: FaultBook,
        log_dir: Path,
        endurance: Endurance | None = None,
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.faults = faults
        self.endurance = endurance
        """The process's slow scenario and noise (None: a steady engine)."""
        self.log = ReplicaLog(log_dir / f"replica{index}.log")
        self.metrics = EngineMetrics(cfg.model, cfg.max_model_len, cache_info(cfg))
        self.engine = Scheduler(cfg, self.metrics, self.log, endurance)
        extra = endurance.fb_leak_mib if endurance is not None and endurance.leaks else None
        self.dcgm = DcgmExporter(index, cfg.gpus_per_replica, cfg.hostname, self._load, extra)
        self.alive = True
        self.listening = False
        self.created = int(time.time())
        self.request_counter = 0
        self.rejections = 0
        self.url = ""
        self.dcgm_url = ""
        self._prefix = PrefixCache(cfg.block_size, cfg.num_gpu_blocks)
        self._tasks: list[asyncio.Task[None]] = []
        self._api_runner: web.AppRunner | None = None
        self._dcgm_runner: web.AppRunner | None = None

    def _load(self) -> tuple[float, float, bool]:
        if not self.alive:
            return 0.0, 0.0, False
        util = len(self.engine.running) / self.cfg.max_num_seqs
        return util, self.engine.kv_usage, True

    def prefix_hit(self, tokens: Sequence[str | int]) -> int:
        """Block-aligned tokens of the prompt's leading blocks already in the prefix cache
        (:class:`simengine.prefix_cache.PrefixCache`)."""
        return self._prefix.hit(tokens)

    async def start(self, api_sock: socket.socket, dcgm_sock: socket.socket) -> None:
        """Serve the API and the DCGM exporter on the given listening sockets."""
        check = header_middleware(self.cfg)
        app = web.Application(client_max_size=64 * 2**20, middlewares=[check] if check else [])
        OpenAIRoutes(self).add_to(app)
        self._api_runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._api_runner.setup()
        ssl_context = server_context(self.cfg)
        await web.SockSite(
            self._api_runner, api_sock, backlog=4096, ssl_context=ssl_context
        ).start()
        dapp = web.Application()
        dapp.router.add_get("/metrics", self._dcgm_metrics)
        self._dcgm_runner = web.AppRunner(dapp, access_log=None, shutdown_timeout=1.0)
        await self._dcgm_runner.setup()
        await web.SockSite(self._dcgm_runner, dcgm_sock).start()
        self.url = _url(api_sock, "https" if ssl_context is not None else "http")
        self.dcgm_url = _url(dcgm_sock) + "/metrics"
        self.listening = True
        engine_task = asyncio.create_task(self.engine.run(), name=f"engine{self.index}")
        engine_task.add_done_callback(self._engine_done)
        self._tasks.append(engine_task)
        self._tasks.append(asyncio.create_task(self._stats_loop(), name=f"stats{self.index}"))
        cfg = self.cfg
        self.log.info(
            "simengine.py:0",
            f"simengine: SIMULATED vLLM {cfg.version_string} replica {self.index} "
            f"(no model, no GPU); model={cfg.model} seed={cfg.seed}",
        )
        self.log.info(
            "loggers.py:150",
            f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks "
            f"is: {cfg.num_gpu_blocks}",
        )
        self.log.info("api_server.py:1", f"Starting vLLM API server {self.index} on {self.url}")
        self.log.info("launcher.py:37", "Application startup complete.")

    def _engine_done(self, task: asyncio.Task[None]) -> None:
        # A bug in the engine model must not leave requests hanging: treat it as what it
        # is, an engine crash, with the traceback in the replica log.
        if task.cancelled() or task.exception() is None or not self.alive:
            return
        exc = task.exception()
        for line in traceback.format_exception(exc):
            for part in line.rstrip("\n").splitlines():
                self.log.raw(f"(EngineCore_DP0 pid={self.log.pid}) {part}")
        self.die()

    async def _dcgm_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.dcgm.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def _stats_loop(self) -> None:
        eng = self.engine
        last = time.monotonic()
        was_busy = False
        while self.alive:
            await asyncio.sleep(self.cfg.log_interval_s)
            now = time.monotonic()
            dt = max(now - last, 1e-9)
            last = now
            p = eng.interval_prompt_tokens / dt
            g = eng.interval_generation_tokens / dt
            eng.interval_prompt_tokens = eng.interval_generation_tokens = 0
            busy = bool(p or g)
            if busy or was_busy:  # vLLM drops the line to DEBUG on an idle server
                hit = 100.0 * eng.prefix_hits / eng.prefix_queries if eng.prefix_queries else 0.0
                self.log.info(
                    "loggers.py:123",
                    f"Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
                    f"throughput: {g:.1f} tokens/s, Running: {len(eng.running)} reqs, "
                    f"Waiting: {len(eng.waiting)} reqs, GPU KV cache usage: "
                    f"{eng.kv_usage * 100:.1f}%, Prefix cache hit rate: {hit:.1f}%",
                )
            was_busy = busy

    # -- faults on the replica --------------------------------------------------------------
    def fire(self, rule: FaultRule, note: str) -> None:
        """Carry out a replica/GPU action (``xid`` or ``engine_death``)."""
        if note:
            self.log.warning("simengine.py:0", f"simengine fault {rule.action}: {note}")
        if rule.action == "xid":
            self.xid(rule.xid, rule.gpu)
        elif rule.action == "engine_death":
            self.die()

    def xid(self, xid: int, gpu: int) -> None:
        """An Xid on one of this replica's GPUs: the gauge and the log lines a node shows."""
        board = self.dcgm.gpu(gpu)
        if board.index != gpu:
            self.log.warning("simengine.py:0", f"GPU {gpu} does not exist; using GPU {board.index}")
        board.last_xid = xid
        pid = self.log.pid
        if xid == 31:
            self.log.error(
                "dump_input.py:79",
                "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
                proc="EngineCore_DP0",
            )
        uptime = time.monotonic()
        self.log.raw(
            f"[{uptime:12.6f}] NVRM: Xid (PCI:{board.pci}): {xid}, pid={pid}, "
            f"name=VLLM::EngineCore0, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS "
            "GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000. Fault is of type FAULT_PDE "
            "ACCESS_TYPE_VIRT_READ"
        )

    def die(self) -> None:
        """Engine death: in-flight requests fail, /health turns 503, then the port closes."""
        if not self.alive:
            return
        self.alive = False
        pid = self.log.pid
        core = "EngineCore_DP0"
        self.log.error("core.py:710", "EngineCore encountered a fatal error.", proc=core)
        self.log.raw(f"({core} pid={pid}) Traceback (most recent call last):")
        self.log.raw(
            f'({core} pid={pid})   File "vllm/v1/engine/core.py", line 701, in run_engine_core'
        )
        self.log.raw(f"({core} pid={pid}) RuntimeError: simulated engine death (simengine fault)")
        self.engine.kill()
        self.log.error(
            "async_llm.py:480",
            "AsyncLLM output_handler failed. vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        )
        self.log.error(
            "core_client.py:564",
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        )
        self._tasks.append(asyncio.create_task(self._close_after_death()))

    async def _close_after_death(self) -> None:
        await asyncio.sleep(self.cfg.death_health_s)
        self.log.info("launcher.py:80", "Shutting down FastAPI HTTP server.")
        await self._close_api()

    async def _close_api(self) -> None:
        if self._api_runner is not None:
            runner, self._api_runner = self._api_runner, None
            self.listening = False
            await runner.cleanup()

    async def stop(self) -> None:
        """Clean shutdown: end in-flight requests, close both ports and the log."""
        self.alive = False
        self.engine.dead = True
        for seq in [*self.engine.running, *self.engine.waiting]:
            seq.outcome = "abort"
            seq.resolve()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        for t in self._tasks:
            if t is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        await self._close_api()
        if self._dcgm_runner is not None:
            await self._dcgm_runner.cleanup()
            self._dcgm_runner = None
        self.log.close()


def _url(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"
