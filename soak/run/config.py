"""Run configuration: one pydantic model, layered CLI > ``SOAKTOP_*`` env > TOML > defaults.

Every field has a docstring (it is the CLI and TOML reference) and a bounded range
(:func:`soak.run.config_words.allowed` says it in words, for errors, ``--help`` and the
README): floats are finite, whole numbers and lists have upper bounds, URLs are http(s)
with a host and a port in 1–65535, files exist and parse (:mod:`soak.run.config_checks`).
Unknown keys are errors. A bad value produces a sentence naming the field, where it came
from (flag, ``SOAKTOP_*`` variable or config file), the value and what is allowed
(:mod:`soak.run.config_words`), and the CLI exits 2 before any run directory exists. The
layers are merged by :func:`soak.run.config_load.load_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator as After
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from loadgen.headers import check_spec, headers_problem
from loadgen.tls import check_pem
from soak.judge import limits
from soak.run.config_fields import (
    checked_commands,
    checked_dcgm,
    checked_endpoints,
    checked_matrix,
    checked_out,
    checked_prompts,
    checked_server_cmd_file,
    checked_server_logs,
    checked_server_pids,
    checked_suite_files,
    checked_warmup,
)
from soak.run.config_mix import MixSpec, read_mix_value
from soak.run.config_ray import ray_problem
from soak.run.config_shards import Shards, mark_auto, shards_problem
from soak.run.config_telemetry import required_kinds, sources_problem
from soak.run.config_turns import MAX_TURNS, ThinkTime, turns_problem


class ConfigError(ValueError):
    """A configuration the run cannot start with; ``str()`` is the operator's message."""


DAY_S = 86_400.0
LONGEST_S = 30 * DAY_S
"""Upper bound of every duration, timeout and interval: 30 days."""
MAX_LIST = 256
"""Most entries of a list option (endpoints, suites, logs, thresholds...)."""
PID_MAX = 4_194_304
"""Linux's largest pid_max (2^22)."""

Xid = Annotated[int, Field(ge=1, le=1000)]
Pid = Annotated[int, Field(ge=1, le=PID_MAX)]
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
"""A name inside the run id: label, purpose, engine."""
SAMPLING_EXTRA = (
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
"""Sampling fields sent in every load request when set (temperature has its own place)."""


class RunConfig(BaseModel):
    """Everything that defines one soak run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    endpoints: Annotated[list[Annotated[str, Field(max_length=2048)]], After(checked_endpoints)] = (
        Field(min_length=1, max_length=MAX_LIST)
    )
    """Base URLs of the OpenAI-compatible servers (one per replica), e.g. http://127.0.0.1:8000."""
    model: str = Field(min_length=1, max_length=256)
    """Served model name sent in every request (must be listed by /v1/models)."""
    api: Literal["chat", "completions", "responses"] = "chat"
    """The streaming API of the load: /v1/chat/completions, /v1/completions, /v1/responses."""
    concurrency: int = Field(32, ge=1, le=100_000)
    """Closed-loop workers: each sends its next request when its last one ends."""
    arrival: Literal["closed", "constant", "poisson", "gamma", "trace"] = "closed"
    """closed (concurrency workers), an open-loop schedule at rate: constant, poisson, or
    gamma (bursty, with burstiness), or trace:FILE (a replay); see soak.run.config_arrival."""
    rate: float | None = Field(None, gt=0, le=100_000)
    """Open loop: requests per second the schedule offers (required there)."""
    burstiness: float | None = Field(None, gt=0, le=100)
    """Open loop, gamma only: coefficient of variation of the gaps (1 Poisson, 3 bursty)."""
    max_in_flight: int | None = Field(None, ge=1, le=100_000)
    """Open loop: most requests in flight; an arrival past it waits, counted (default
    4 × rate × 60 s, 64 to 10,000)."""
    arrival_seed: int | None = Field(None, ge=0, le=2**63 - 1)
    """Open loop: seed of the arrival schedule (default: pool_seed)."""
    trace_file: Path | None = None
    """The trace replayed by arrival = "trace:FILE" (Mooncake, Azure, BurstGPT, soaktop)."""
    time_scale: float | None = Field(None, gt=0, le=1_000_000)
    """Trace replay: its times are divided by this (2: twice as fast; default 1)."""
    stages: str | None = Field(None, max_length=8192)
    """k6-style stages, "2m:10rps,10m:40rps" (open loop) or "1m:16,5m:64" (closed loop):
    linear ramps from 0; the run lasts their sum (soak.run.config_steps)."""
    sweep: str | None = Field(None, max_length=4096)
    """Steps of one run, "rate=5,10,20,40" or "concurrency=4,8,16", ascending."""
    step_duration_s: float | None = Field(None, gt=0, le=LONGEST_S)
    """A sweep's step length (default: duration_s split evenly)."""
    settle_s: float | None = Field(None, ge=0, le=LONGEST_S)
    """A sweep step's head left out of its figures (default 10 s)."""
    slo: str | None = Field(None, max_length=1024)
    """Per-request objectives for each step's goodput, e.g. "ttft<2s,tpot<50ms"."""
    duration_s: float | None = Field(60.0, gt=0, le=LONGEST_S)
    """Issue window in seconds (the drain comes after it)."""
    max_requests: int | None = Field(None, ge=1, le=1_000_000_000)
    """Stop issuing after this many requests (with or instead of duration_s)."""
    max_tokens: int = Field(256, ge=1, le=10_000_000)
    """max_tokens of every load request."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The body field carrying max_tokens (chat, completions; responses: max_output_tokens)."""
    ignore_eos: bool = False
    """Send ignore_eos so every request generates exactly max_tokens (vLLM extension)."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature; unset leaves the server default. No per-request seed is ever sent."""
    top_p: float | None = Field(None, gt=0, le=1)
    """Nucleus sampling top_p of every load request; unset leaves the server default."""
    top_k: int | None = Field(None, ge=-1, le=1_000_000)
    """top_k of every load request (vLLM and SGLang; -1 or 0: off); unset: the server's."""
    min_p: float | None = Field(None, ge=0, le=1)
    """min_p of every load request (vLLM and SGLang); unset leaves the server default."""
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    """presence_penalty of every load request; unset leaves the server default."""
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    """frequency_penalty of every load request; unset leaves the server default."""
    repetition_penalty: float | None = Field(None, gt=0, le=10)
    """repetition_penalty of every load request (vLLM, SGLang, TGI; 1: off); unset: the
    server's. The probes keep their own settings."""
    sanity_checks: bool = True
    """Check every completed load response for sanity (empty, runaway whitespace,
    repetition, a finish reason not asked for: ``loadgen.sanity``); ``--no-sanity`` turns
    the checks off."""
    prompts: Annotated[Path | None, After(checked_prompts)] = None
    """Prompt file: ShareGPT JSON (from/value or role/content) or JSONL of {"prompt": ...}."""
    synthetic_input_tokens: int | None = Field(None, ge=1, le=10_000_000)
    """Synthetic prompts of about this many tokens (calibrated with the server's /tokenize)."""
    pool_size: int = Field(256, ge=1, le=1_000_000)
    """Synthetic prompts in the pool; for files, at most this many are used."""
    pool_seed: int = Field(0, ge=0, le=2**63 - 1)
    """Seed for the prompt order and synthetic text (match it across A/B/A arms)."""
    shared_prefix: bool = False
    """Synthetic prompts only: let requests share prefixes (by default each gets a unique one)."""
    turns: int = Field(1, ge=1, le=MAX_TURNS)
    """Turns per conversation (chat; soak.run.config_turns): turn i + 1 sends the history
    (the actual answers) plus the pool's next prompt; on an open loop each arrival starts
    a session; 1: single requests."""
    think_time_s: ThinkTime = None
    """Conversations: the wait from a turn's answer to the next turn (2, 2s, 500ms; 0)."""
    label: str = Field("run", pattern=NAME_PATTERN, max_length=64)
    """Short label in the run id, e.g. baseline-s32."""
    purpose: str = Field("soak", pattern=NAME_PATTERN, max_length=64)
    """Purpose in the run id, e.g. reliability."""
    engine: str | None = Field(None, pattern=NAME_PATTERN, max_length=64)
    """Engine name for the run id; detected from the server when unset."""
    recipe: dict[str, str] = Field(default_factory=dict, max_length=MAX_LIST)
    """Facts about the recipe that no server states (checkpoint revision, image, TP/DP
    size, weight and KV precision, notes), as key = value: recorded in the identity and
    compared between runs."""
    server_cmd_file: Annotated[Path | None, After(checked_server_cmd_file)] = None
    """A file holding the server's exact launch command: recorded in the identity with
    API keys, tokens, passwords and auth headers scrubbed, and hashed."""
    out: Annotated[Path, After(checked_out)] = Path("runs")
    """Directory that receives one run directory per run."""
    drain_timeout_s: float = Field(120.0, gt=0, le=LONGEST_S)
    """After the issue window, how long in-flight requests may take before they are cancelled."""
    barrier_timeout_s: float = Field(60.0, gt=0, le=LONGEST_S)
    """How long all workers get to open their connection before the run is INVALID."""
    connect_timeout_s: float = Field(10.0, gt=0, le=3600)
    """TCP connect timeout per request."""
    read_timeout_s: float = Field(300.0, gt=0, le=LONGEST_S)
    """Longest silence inside a response before it is a read timeout (a generation must fit)."""
    failure_backoff_max_s: float = Field(2.0, ge=0, le=3600)
    """A worker pauses (50 ms doubling up to this) after failures that came before any token,
    so a refusing or dead server is not hit thousands of times a second; 0 disables it."""
    snapshot_interval_s: float = Field(1.0, ge=0.05, le=60)
    """How often the runner appends an aggregated snapshot."""
    window_s: int = Field(10, ge=1, le=600)
    """Sliding window of the live throughput and latency figures."""
    series_window_s: int = Field(60, ge=1, le=3600)
    """Soak windows on one timeline: the load is judged window by window for drift and
    leaks (``windows.jsonl``, the record's ``windows`` and ``endurance``)."""
    warmup: Annotated[str | None, After(checked_warmup)] = Field(None, max_length=32)
    """A soak warm-up at the load's start, ``90s``, ``2m`` or ``200req``: its requests are
    journaled (phase ``warmup``) but left out of the judged figures and the baseline."""
    soak_policy: Literal["default", "none"] = "default"
    """Drift and leak thresholds applied without ``--threshold drift.*/leak.*``: the
    default soak policy, or none."""
    interval_s: float = Field(10.0, ge=0.1, le=DAY_S)
    """Headless mode: seconds between printed status lines."""
    percentile_method: Literal["nearest-rank", "linear"] = limits.PERCENTILE_METHOD
    """Record percentiles: nearest-rank (an observed value) or linear (numpy, vllm bench)."""
    max_failures: int = Field(limits.MAX_FAILURES, ge=0, le=1_000_000_000)
    """Load request failures tolerated before the run FAILS (default: none)."""
    max_sanity_share: float = Field(limits.MAX_SANITY_SHARE, ge=0, le=1)
    """Share of completed load responses with a sanity flag above which the run FAILS."""
    max_loop_lag_s: float = Field(limits.MAX_LOOP_LAG_S, gt=0, le=3600)
    """Client event-loop lag (p99 over the load) above which latencies are the client's: INVALID."""
    headless: bool = False
    """Never open the Textual monitor; print status lines instead."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Serve soaktop's own live figures in Prometheus exposition on this port (off the
    measuring loop: soak.run.metrics_export); None: no endpoint."""
    metrics_host: str = Field("127.0.0.1", min_length=1, max_length=64)
    """Address the metrics endpoint listens on: an IP address or localhost (anything
    but loopback exposes the figures to the network, with a warning)."""
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    """Name of an environment variable holding the API key (the key never reaches disk);
    it must be set and non-empty when the run starts."""
    headers: list[Annotated[str, After(check_spec)]] = Field([], max_length=64)
    """Extra request headers, "Name: value" or "Name: env:VAR" (the value from $VAR): sent
    on the load, the gates and the engine scrapes; the record shows names only."""
    ca_cert: Annotated[Path | None, After(check_pem)] = None
    """A CA bundle (PEM) trusted for https endpoints beside the system's (loadgen.tls)."""
    client_cert: Annotated[Path | None, After(check_pem)] = None
    """A client certificate (PEM) for servers that require mutual TLS."""
    client_key: Annotated[Path | None, After(check_pem)] = None
    """The client certificate's private key (PEM), unless the certificate file holds it."""
    redact: bool = False
    """Drop endpoints, hostnames and paths from everything written to the run directory."""
    gates: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=lambda: ["json", "tools"], max_length=64
    )
    """Probe suites run before and after the load (built in: json, tools, stream-tools,
    tool-result, smoke, needle); empty runs no gates."""
    suite_files: Annotated[list[Path], After(checked_suite_files)] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """Extra suite files (JSON); one named like a built-in suite replaces it."""
    force_load: bool = False
    """Run the load even when a before-load gate failed (recorded in the verdict)."""
    probe_retries: int = Field(0, ge=0, le=5)
    """Retries of a failed probe. Every attempt is recorded, but a task that passes on a
    retry passes (with a note): off by default, so one HTTP 500 fails the run."""
    probe_concurrency: int = Field(4, ge=1, le=64)
    """Probes in flight at once during a gate phase."""
    probe_timeout_s: float = Field(120.0, gt=0, le=LONGEST_S)
    """Longest time one probe may take, all its requests together."""
    probe_expected: bool = False
    """Also check the suites' expected values (only for capable models)."""
    probe_evidence: Literal["failures", "all"] = "failures"
    """Which probes write their full request and response into evidence/: failed ones, or
    all (to re-check every verdict from the raw answers)."""
    canary_interval_s: float | None = Field(300.0, gt=0, le=LONGEST_S)
    """During the load, every this many seconds a small sample of the suites runs beside
    the workers (default 300; 0: no canaries)."""
    canary_tasks: int = Field(2, ge=1, le=1000)
    """Tasks of each suite per canary round (rotating through the suite)."""
    thresholds: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """k6-style pass/fail criteria, e.g. ttft.p99<2s, error_rate==0, e2e.p99<20s,abort."""
    nvml: bool = True
    """Read this host's GPUs through NVML (memory, utilisation, temperature, power,
    throttling, Xid and ECC events); without an NVIDIA driver it says "unavailable" once."""
    dcgm: Annotated[list[Annotated[str, Field(max_length=2048)]], After(checked_dcgm)] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """DCGM exporter /metrics URLs (one per GPU node): GPU memory, utilisation, temperature,
    power, throttling, Xid and ECC faults."""
    server_log: Annotated[list[Path], After(checked_server_logs)] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """Server log file(s), one per replica: followed for fault lines (CUDA errors, Xid,
    NCCL, engine death, tracebacks), and excerpts go into failed probes' evidence. A file
    may appear after the start (it is waited for), but its directory must exist."""
    server_log_cmd: Annotated[
        list[Annotated[str, Field(max_length=4096)]], After(checked_commands)
    ] = Field(default_factory=list, max_length=MAX_LIST)
    """Commands whose output is a server log, e.g. "docker logs -f --since 0s vllm" or
    "journalctl -f -u vllm" (followed like server_log; the program must be on PATH)."""

    matrix: Annotated[str | None, After(checked_matrix)] = Field(None, max_length=4096)
    """Run the matrix profile instead of a soak: "input=6000,25000 concurrency=1,4 reps=3
    requests=4 [warmup=1]" — every (input, concurrency) cell as reps × requests timed
    requests after an untimed warm-up (warmup requests per worker), unique synthetic
    prompts seeded by pool_seed (the same in every arm of an A/B/A scout)."""
    reasoning_effort: str | None = Field(None, pattern=r"^[a-z]+$", max_length=32)
    """Sent as reasoning_effort in every load request (e.g. high, max), when set."""
    reconcile: Literal["report", "strict"] = "report"
    """Client vs server counters per phase: report (a mismatch is a note on the verdict) or
    strict (a mismatch with no failed or cut request to explain it makes the run INVALID)."""
    ignore_xid: list[Xid] = Field(default_factory=list, max_length=MAX_LIST)
    """Xid codes that do not fail the run (still recorded), e.g. 45 (preemptive cleanup)."""
    server_pid: Annotated[list[Pid], After(checked_server_pids)] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """PIDs of server processes on this host whose CPU and memory are sampled (host telemetry)."""
    telemetry_interval_s: float = Field(1.0, ge=0.1, le=60)
    """Sampling interval of the engine /metrics, GPU and host sources."""
    max_client_cpu_percent: float = Field(limits.MAX_CLIENT_CPU_PERCENT, gt=0, le=1000)
    """Runner CPU (percent of one core, where its event loop runs) above which, held for
    client_overload_s, the client could not keep up: the run is INVALID."""
    client_overload_s: float = Field(limits.CLIENT_OVERLOAD_S, gt=0, le=LONGEST_S)
    """How long client CPU over max_client_cpu_percent (or the client behind the server's
    writes, max_client_behind) must last to make the run INVALID."""
    max_client_behind: float = Field(limits.MAX_CLIENT_BEHIND, gt=0, le=1)
    """Share of sampled socket reads that found bytes already queued (the client read
    slower than the server wrote) above which a second counts as behind; held for
    client_overload_s, the run is INVALID (client_behind)."""
    require_telemetry: list[str] = Field(default_factory=list, max_length=5)
    """Telemetry kinds that must cover the load (engine, gpu, health, log, host): one that
    answered less than half its expected samples FAILS the run (else it is a note)."""
    mix: MixSpec | None = None
    """A mixed load (--mix FILE): TOML [[class]] tables, each a workload class with a weight
    and its own request fields (soak.run.config_mix); held as read. Unset: one class."""
    shards: Shards = 1
    """Load processes on this host the closed loop's workers are split over (--shards N,
    soak.run.shards; a closed-loop steady load only, soak.run.config_shards); 1: the
    runner's own loop; auto: resolved to a number when the config is built (shards_auto
    says how)."""
    shards_auto: str | None = Field(None, max_length=300)
    """``--shards auto``: the request and how it was resolved, in words (``auto: 2
    shards (3 spare cores of 4, 512 streams need 2)``); None when a number was given."""
    ray: str | None = Field(None, min_length=1, max_length=300)
    """The shards on the nodes of the Ray cluster at HOST:PORT, one node each (nodes
    that offer the soaktop_shard resource; needs soaktop[distributed]); unset: on this
    host."""

    @field_validator("mix", mode="before")
    @classmethod
    def _read_mix(cls, v: Any, info: ValidationInfo) -> Any:
        return read_mix_value(v, info.data)  # the fields above it are validated: cross-checks

    @field_validator("require_telemetry", mode="before")
    @classmethod
    def _check_required(cls, v: Any) -> Any:
        return required_kinds(v)

    @model_validator(mode="after")
    def _check_required_sources(self) -> RunConfig:
        if (why := sources_problem(self)) is not None:
            raise ValueError(why)
        if self.warmup is not None and self.matrix:
            raise ValueError(
                f"warmup = {self.warmup!r} is for a steady soak; a matrix has its own "
                "warm-up per cell (warmup=N in the matrix spec): drop one"
            )
        return self

    @field_validator("metrics_host")
    @classmethod
    def _check_metrics_host(cls, v: str) -> str:
        from soak.run.metrics_export import host_problem

        if (why := host_problem(v)) is not None:
            raise ValueError(why)
        return v

    @field_validator("canary_interval_s", mode="before")
    @classmethod
    def _zero_is_off(cls, v: Any) -> Any:
        return None if v in (0, "0", 0.0, "") else v

    @field_validator("recipe", mode="before")
    @classmethod
    def _check_recipe(cls, v: Any) -> Any:
        from soak.run.config_public import declared_recipe

        return declared_recipe(v)

    @model_validator(mode="after")
    def _check_thresholds(self) -> RunConfig:
        from soak.judge.thresholds import ThresholdError, parse_thresholds

        try:
            names = self.mix.names if self.mix is not None else ()  # class.<name>.* checked
            parse_thresholds(self.thresholds, gpu_telemetry=self.gpu_telemetry, classes=names)
        except ThresholdError as e:
            raise ValueError(f"thresholds: {e}") from None
        return self

    @model_validator(mode="after")
    def _check_suites(self) -> RunConfig:
        from probes.suite import SuiteError, load_suites

        try:
            load_suites(self.gates, self.suite_files)
        except SuiteError as e:
            raise ValueError(f"gates = {','.join(self.gates)!r}: {e}") from None
        return self

    @model_validator(mode="after")
    def _check_arrival(self) -> RunConfig:
        from soak.run.config_arrival import arrival_problem
        from soak.run.config_steps import steps_problem  # first: steps set rate, duration

        why = (
            steps_problem(self)
            or arrival_problem(self)
            or turns_problem(self)
            or shards_problem(self)  # "auto" resolved to a number first
            or ray_problem(self)
            or headers_problem(self.headers, self.api_key_env)
        )
        if why is not None:
            raise ValueError(why)
        return self

    @model_validator(mode="before")
    @classmethod
    def _split_trace(cls, data: Any) -> Any:
        from soak.run.config_arrival import split_trace

        return split_trace(data)

    @model_validator(mode="before")
    @classmethod
    def _mark_auto_shards(cls, data: Any) -> Any:
        return mark_auto(data)  # resolved in _check_arrival, once concurrency is checked

    @model_validator(mode="after")
    def _check_combinations(self) -> RunConfig:
        from soak.run.config_public import combination_problem

        if (why := combination_problem(self)) is not None:
            raise ValueError(why)
        return self

    @property
    def gpu_telemetry(self) -> bool:
        """Whether the run has a GPU source (so gpu.* thresholds can have data)."""
        return self.nvml or bool(self.dcgm)

    def sampling_extra(self) -> tuple[tuple[str, Any], ...]:
        """The sampling fields set beyond temperature, as body fields of every load
        request (``loadgen.prompts.BodyBuilder``'s ``extra``): never a seed."""
        return tuple(
            (name, value) for name in SAMPLING_EXTRA if (value := getattr(self, name)) is not None
        )

    def body_extra(self) -> tuple[tuple[str, Any], ...]:
        """Every body field of a load request beyond model, prompt, max_tokens, ignore_eos
        and temperature: the sampling fields, then ``reasoning_effort`` when set (the soak
        and the matrix send the same)."""
        reasoning = (("reasoning_effort", self.reasoning_effort),) if self.reasoning_effort else ()
        return self.sampling_extra() + reasoning

    def public_dict(self) -> dict[str, Any]:
        """The config as written to the run directory (redacted when asked; a declared
        fact whose key names a secret never: ``<secret>``): :mod:`soak.run.config_public`."""
        from soak.run.config_public import public_config

        return public_config(self)
