"""Settings of the simulated engine (one process, several replicas).

Every field has a docstring; the CLI (`simengine.cli`) maps its flags onto these names.
Speeds are tunable so a test can make engine state visible in a second (tiny
``max_num_seqs``, tiny ``num_gpu_blocks``) while the demo looks like a real GPU server.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simengine.faults import SCENARIO_ONSET_S, SCENARIOS, FaultRule


class SimConfig(BaseModel):
    """Everything a simulated vLLM deployment needs; defaults look like a 4-GPU replica."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Listen address. Loopback unless ``allow_remote``."""
    port: int = Field(default=0, ge=0, le=65535)
    """0: free ports for everything. P: replica i serves P+i, its DCGM exporter P+100+i."""
    allow_remote: bool = False
    """Permit a non-loopback ``host`` (the simulator has no authentication)."""
    replicas: int = Field(default=2, ge=1, le=64)
    """Independent engines, each its own port, scheduler, /metrics and log."""
    gpus_per_replica: int = Field(default=4, ge=1, le=16)
    """Simulated GPUs per replica, shown on the replica's DCGM-style endpoint."""
    model: str = "tiny-sim"
    """Served model name (``/v1/models`` id and the ``model_name`` metric label)."""
    max_model_len: int = Field(default=8192, ge=16)
    """Context length: prompt + output tokens per request."""
    max_num_seqs: int = Field(default=256, ge=1)
    """Running slots: sequences decoded together in one step."""
    max_num_queued_reqs: int | None = Field(default=None, ge=0)
    """Waiting-queue bound; beyond it requests are rejected (HTTP 503 or an error event
    inside a 200 stream, alternating, as vLLM does). None: unbounded."""
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    """Prefill token budget of one step (a longer prompt is admitted alone)."""
    num_gpu_blocks: int = Field(default=16384, ge=1)
    """KV cache blocks; token slots = num_gpu_blocks × block_size."""
    block_size: int = Field(default=16, ge=1)
    """Tokens per KV block."""
    prefill_us_per_token: float = Field(default=20.0, ge=0)
    """Prefill cost added to a step, per prompt token admitted in it (µs)."""
    decode_ms_base: float = Field(default=20.0, ge=0.1)
    """Fixed cost of one decode step (ms)."""
    decode_ms_per_seq: float = Field(default=0.1, ge=0)
    """Extra step cost per running sequence (ms): bigger batches decode slower per token."""
    mean_output_tokens: float = Field(default=128.0, ge=1)
    """Mean of the geometric EOS length distribution (when not ``ignore_eos``)."""
    default_max_tokens: int = Field(default=256, ge=1)
    """Output cap when a request gives no max_tokens (also bounded by the context)."""
    reasoning_tokens: int = Field(default=0, ge=0)
    """Emit this many ``delta.reasoning`` tokens before the answer (0: off)."""
    tool_call_probability: float = Field(default=0.5, ge=0, le=1)
    """With ``tool_choice: auto``, the chance that the answer is a tool call."""
    parallel_tool_call_probability: float = Field(default=0.0, ge=0, le=1)
    """With parallel tool calls allowed and ≥2 tools, the chance of two calls."""
    seed: int = 0
    """Seeds output lengths, token text, structured values and tool choices."""
    scenario: str = "healthy"
    """Named scenario: healthy, post-load-500, broken-contracts, xid-mid-run, engine-death,
    slow-leak, throughput-decay, garbage-after (``simengine.faults.SCENARIO_NOTES`` says
    what each does)."""
    scenario_at: float | None = Field(default=None, ge=0)
    """Seconds into load at which the scenario strikes (xid-mid-run, engine-death) or
    begins to degrade (slow-leak, throughput-decay, garbage-after); None: its own onset."""
    scenario_speed: float = Field(default=1.0, gt=0, le=1000)
    """Time compression of the slow scenarios: their rates run this many times faster."""
    noise: bool = False
    """Realistic noise from the first load request: lognormal jitter of every engine step
    (TTFT and ITL) and a GC-like sawtooth of the process memory."""
    faults: list[FaultRule] = Field(default_factory=list)
    """Extra fault rules (added to the scenario's)."""
    tls_cert: Path | None = None
    """Serve the API over TLS with this PEM certificate (simengine.access)."""
    tls_key: Path | None = None
    """The TLS certificate's private key (PEM), unless the certificate file holds it."""
    tls_client_ca: Path | None = None
    """Require a client certificate signed by this CA (mutual TLS)."""
    require_headers: list[str] = Field(default_factory=list)
    """Headers every API request must carry, "Name: value" (else HTTP 401)."""
    log_dir: Path | None = None
    """Where replica<i>.log files go (None: a fresh temporary directory)."""
    ready_file: Path | None = None
    """Written atomically with the ready JSON once every replica listens."""
    version_string: str = "0.32.0"
    """What ``GET /version`` reports."""
    log_interval_s: float = Field(default=10.0, gt=0)
    """Period of the ``Avg prompt throughput`` log line."""
    death_health_s: float = Field(default=2.0, ge=0)
    """After engine death, how long /health answers 503 before the socket closes."""
    hostname: str = "sim-node"
    """Base of the DCGM ``Hostname`` label (replica i: ``<hostname>-<i>``)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    """Reported in ``vllm:cache_config_info`` and ``/server_info``."""
    server_info: bool = True
    """Answer ``GET /server_info`` as vLLM does with ``VLLM_SERVER_DEV_MODE=1``; False:
    404, as production vLLM does."""

    @model_validator(mode="after")
    def _check(self) -> SimConfig:
        if self.scenario not in SCENARIOS:
            raise ValueError(
                f"scenario {self.scenario!r} is unknown; choose one of {', '.join(SCENARIOS)}"
            )
        if not self.allow_remote and not is_loopback(self.host):
            raise ValueError(
                f"host {self.host!r} is not a loopback address; the simulator has no "
                "authentication, pass allow_remote (--allow-remote) to listen there anyway"
            )
        slots = self.num_gpu_blocks * self.block_size
        if slots < self.max_model_len:
            # vLLM refuses to start when one max-length request cannot fit in the KV cache.
            raise ValueError(
                f"KV cache holds {slots} tokens (num_gpu_blocks {self.num_gpu_blocks} × "
                f"block_size {self.block_size}), less than max_model_len {self.max_model_len}"
            )
        if self.port and self.port + 100 + self.replicas - 1 > 65535:
            raise ValueError(f"port {self.port}: port+100+replicas runs past 65535")
        return self

    @property
    def onset_s(self) -> float:
        """When the scenario strikes or begins, in seconds after the first load request."""
        if self.scenario_at is not None:
            return self.scenario_at
        return SCENARIO_ONSET_S.get(self.scenario, 30.0)

    @property
    def kv_token_slots(self) -> int:
        """KV cache capacity in tokens."""
        return self.num_gpu_blocks * self.block_size


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IPv4/IPv6 literals."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
