"""Run configuration: one pydantic model, layered CLI > ``SOAKTOP_*`` env > TOML > defaults.

Every field has a docstring (it is the CLI and TOML reference). Unknown keys are errors.
A bad value produces a message naming the field, the value and what is allowed, and
exits 2 before any run directory exists.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A configuration the run cannot start with; ``str()`` is the operator's message."""


class RunConfig(BaseModel):
    """Everything that defines one soak run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    endpoints: list[str] = Field(min_length=1)
    """Base URLs of the OpenAI-compatible servers (one per replica), e.g. http://127.0.0.1:8000."""
    model: str = Field(min_length=1)
    """Served model name sent in every request (must be listed by /v1/models)."""
    api: Literal["chat", "completions"] = "chat"
    """Which streaming API the load uses: /v1/chat/completions or /v1/completions."""
    concurrency: int = Field(32, ge=1, le=100_000)
    """Closed-loop workers: each sends its next request when its last one ends."""
    duration_s: float | None = Field(60.0, gt=0)
    """Issue window in seconds (the drain comes after it)."""
    max_requests: int | None = Field(None, ge=1)
    """Stop issuing after this many requests (with or instead of duration_s)."""
    max_tokens: int = Field(256, ge=1)
    """max_tokens of every load request."""
    ignore_eos: bool = False
    """Send ignore_eos so every request generates exactly max_tokens (vLLM extension)."""
    temperature: float | None = Field(None, ge=0)
    """Sampling temperature; unset leaves the server default. No per-request seed is ever sent."""
    prompts: Path | None = None
    """Prompt file: ShareGPT JSON (from/value or role/content) or JSONL of {"prompt": ...}."""
    synthetic_input_tokens: int | None = Field(None, ge=1)
    """Synthetic prompts of about this many tokens (calibrated with the server's /tokenize)."""
    pool_size: int = Field(256, ge=1)
    """Synthetic prompts in the pool; for files, at most this many are used."""
    pool_seed: int = 0
    """Seed for the prompt order and synthetic text (match it across A/B/A arms)."""
    shared_prefix: bool = False
    """Synthetic prompts only: let requests share prefixes (by default each gets a unique one)."""
    label: str = Field("run", pattern=r"^[A-Za-z0-9._-]+$")
    """Short label in the run id, e.g. baseline-s32."""
    purpose: str = Field("soak", pattern=r"^[A-Za-z0-9._-]+$")
    """Purpose in the run id, e.g. reliability."""
    engine: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$")
    """Engine name for the run id; detected from the server when unset."""
    out: Path = Path("runs")
    """Directory that receives one run directory per run."""
    drain_timeout_s: float = Field(120.0, gt=0)
    """After the issue window, how long in-flight requests may take before they are cancelled."""
    barrier_timeout_s: float = Field(60.0, gt=0)
    """How long all workers get to open their connection before the run is INVALID."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """TCP connect timeout per request."""
    read_timeout_s: float = Field(300.0, gt=0)
    """Longest silence inside a response before it is a read timeout (a generation must fit)."""
    failure_backoff_max_s: float = Field(2.0, ge=0)
    """A worker pauses (50 ms doubling up to this) after failures that came before any token,
    so a refusing or dead server is not hit thousands of times a second; 0 disables it."""
    snapshot_interval_s: float = Field(1.0, gt=0, le=60)
    """How often the runner appends an aggregated snapshot."""
    window_s: int = Field(10, ge=1, le=600)
    """Sliding window of the live throughput and latency figures."""
    interval_s: float = Field(10.0, gt=0)
    """Headless mode: seconds between printed status lines."""
    percentile_method: Literal["nearest-rank", "linear"] = "nearest-rank"
    """Record percentiles: nearest-rank (an observed value) or linear (numpy, vllm bench)."""
    max_failures: int = Field(0, ge=0)
    """Load request failures tolerated before the run FAILS (default: none)."""
    max_loop_lag_s: float = Field(0.5, gt=0)
    """Client event-loop lag (p99 over the load) above which latencies are the client's: INVALID."""
    headless: bool = False
    """Never open the Textual monitor; print status lines instead."""
    api_key_env: str | None = None
    """Name of an environment variable holding the API key (the key never reaches disk)."""
    redact: bool = False
    """Drop endpoints, hostnames and paths from everything written to the run directory."""
    gates: list[str] = Field(default_factory=lambda: ["json", "tools"])
    """Probe suites run before and after the load (built in: json, tools, stream-tools,
    tool-result, smoke, needle); empty runs no gates."""
    suite_files: list[Path] = Field(default_factory=list)
    """Extra suite files (JSON); one named like a built-in suite replaces it."""
    force_load: bool = False
    """Run the load even when a before-load gate failed (recorded in the verdict)."""
    probe_retries: int = Field(0, ge=0, le=5)
    """Retries of a failed probe. Every attempt is recorded, but a task that passes on a
    retry passes (with a note): off by default, so one HTTP 500 fails the run."""
    probe_concurrency: int = Field(4, ge=1, le=64)
    """Probes in flight at once during a gate phase."""
    probe_timeout_s: float = Field(120.0, gt=0)
    """Longest time one probe may take, all its requests together."""
    probe_expected: bool = False
    """Also check the suites' expected values (only for capable models)."""
    probe_evidence: Literal["failures", "all"] = "failures"
    """Which probes write their full request and response into evidence/: failed ones, or
    all (to re-check every verdict from the raw answers)."""
    canary_interval_s: float | None = Field(300.0, gt=0)
    """During the load, every this many seconds a small sample of the suites runs beside
    the workers (default 300; 0: no canaries)."""
    canary_tasks: int = Field(2, ge=1)
    """Tasks of each suite per canary round (rotating through the suite)."""
    thresholds: list[str] = Field(default_factory=list)
    """k6-style pass/fail criteria, e.g. ttft.p99<2s, error_rate==0, e2e.p99<20s,abort."""
    nvml: bool = True
    """Read this host's GPUs through NVML (memory, utilisation, temperature, power,
    throttling, Xid and ECC events); without an NVIDIA driver it says "unavailable" once."""
    dcgm: list[str] = Field(default_factory=list)
    """DCGM exporter /metrics URLs (one per GPU node): GPU memory, utilisation, temperature,
    power, throttling, Xid and ECC faults."""
    server_log: list[Path] = Field(default_factory=list)
    """Server log file(s), one per replica: followed for fault lines (CUDA errors, Xid,
    NCCL, engine death, tracebacks), and excerpts go into failed probes' evidence."""
    server_log_cmd: list[str] = Field(default_factory=list)
    """Commands whose output is a server log, e.g. "docker logs -f --since 0s vllm" or
    "journalctl -f -u vllm" (followed like server_log)."""

    matrix: str | None = None
    """Run the matrix profile instead of a soak: "input=6000,25000 concurrency=1,4 reps=3
    requests=4 [warmup=1]" — every (input, concurrency) cell as reps × requests timed
    requests after an untimed warm-up (warmup requests per worker), unique synthetic
    prompts seeded by pool_seed (the same in every arm of an A/B/A scout)."""
    reasoning_effort: str | None = Field(None, pattern=r"^[a-z]+$")
    """Sent as reasoning_effort in every load request (e.g. high, max), when set."""
    reconcile: Literal["report", "strict"] = "report"
    """Client vs server counters per phase: report (a mismatch is a note on the verdict) or
    strict (a mismatch with no failed or cut request to explain it makes the run INVALID)."""
    ignore_xid: list[int] = Field(default_factory=list)
    """Xid codes that do not fail the run (still recorded), e.g. 45 (preemptive cleanup)."""
    server_pid: list[int] = Field(default_factory=list)
    """PIDs of server processes on this host whose CPU and memory are sampled (host telemetry)."""
    telemetry_interval_s: float = Field(1.0, ge=0.1, le=60)
    """Sampling interval of the engine /metrics, GPU and host sources."""
    max_client_cpu_percent: float = Field(95.0, gt=0)
    """Runner CPU (percent of one core, where its event loop runs) above which, held for
    client_overload_s, the client could not keep up: the run is INVALID."""
    client_overload_s: float = Field(10.0, gt=0)
    """How long client CPU over max_client_cpu_percent must last to make the run INVALID."""

    @field_validator("endpoints")
    @classmethod
    def _check_endpoints(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"{url!r} is not an http(s) URL like http://127.0.0.1:8000")
            if parts.username or parts.password:
                raise ValueError(
                    "credentials inside an endpoint URL would be written to the run directory; "
                    "give the key with --api-key-env VAR instead"
                )
            out.append(url.rstrip("/").removesuffix("/v1"))
        return out

    @field_validator("canary_interval_s", mode="before")
    @classmethod
    def _zero_is_off(cls, v: Any) -> Any:
        return None if v in (0, "0", 0.0, "") else v

    @field_validator("server_log_cmd")
    @classmethod
    def _check_commands(cls, v: list[str]) -> list[str]:
        for cmd in v:
            try:
                argv = shlex.split(cmd)
            except ValueError as e:
                raise ValueError(f"{cmd!r} is not a command line: {e}") from None
            if not argv:
                raise ValueError("an empty command; give e.g. 'docker logs -f vllm'")
        return v

    @model_validator(mode="after")
    def _check_thresholds(self) -> RunConfig:
        from soak.thresholds import ThresholdError, parse_thresholds

        try:
            parse_thresholds(self.thresholds, gpu_telemetry=self.gpu_telemetry)
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

    @field_validator("server_pid")
    @classmethod
    def _check_server_pids(cls, v: list[int]) -> list[int]:
        from soak.host_watch import check_server_pid

        for pid in v:
            if (why := check_server_pid(pid)) is not None:
                raise ValueError(f"{pid}: {why}")
        return v

    @field_validator("matrix")
    @classmethod
    def _check_matrix(cls, v: str | None) -> str | None:
        from soak.matrix import MatrixError, parse_matrix

        if v is None:
            return None
        try:
            return parse_matrix(v).text()
        except MatrixError as e:
            raise ValueError(str(e).removeprefix("matrix: ")) from None

    @model_validator(mode="after")
    def _check_combinations(self) -> RunConfig:
        if self.duration_s is None and self.max_requests is None:
            raise ValueError("set duration_s or max_requests: the issue window needs an end")
        if self.prompts is not None and self.synthetic_input_tokens is not None:
            raise ValueError("prompts and synthetic_input_tokens are exclusive: choose one source")
        if self.matrix is not None and (
            self.prompts is not None or self.synthetic_input_tokens is not None
        ):
            raise ValueError(
                "matrix builds its own synthetic prompts per cell: drop prompts and "
                "synthetic_input_tokens"
            )
        if self.prompts is not None and not self.prompts.is_file():
            raise ValueError(f"prompts file {str(self.prompts)!r} does not exist")
        return self

    @property
    def gpu_telemetry(self) -> bool:
        """Whether the run has a GPU source (so gpu.* thresholds can have data)."""
        return self.nvml or bool(self.dcgm)

    def public_dict(self) -> dict[str, Any]:
        """The config as written to the run directory (redacted when asked)."""
        data = self.model_dump(mode="json")
        if self.redact:
            data["endpoints"] = [f"<endpoint {i}>" for i in range(len(self.endpoints))]
            data["out"] = "<redacted>"
            if data["prompts"]:
                data["prompts"] = "<redacted>"
            data["api_key_env"] = "<redacted>" if data["api_key_env"] else None
            data["suite_files"] = ["<redacted>" for _ in data["suite_files"]]
            data["server_log"] = ["<redacted>" for _ in data["server_log"]]
            data["server_log_cmd"] = ["<redacted>" for _ in data["server_log_cmd"]]
            data["dcgm"] = [f"<dcgm {i}>" for i in range(len(data["dcgm"]))]
        return data


def format_validation_error(err: ValidationError, source: str = "") -> str:
    """One line per problem: the field, the value given and what is allowed."""
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "config"
        if e["type"] == "extra_forbidden":
            allowed = ", ".join(sorted(RunConfig.model_fields))
            lines.append(f"unknown key {field!r}{source}; allowed keys: {allowed}")
            continue
        value = _mask_userinfo(e.get("input"))
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{field}{shown}{source}: {msg}")
    return "\n".join(lines)


def _mask_userinfo(value: Any) -> Any:
    """Never echo a password given inside a URL, even in an error message."""
    if isinstance(value, list):
        return [_mask_userinfo(v) for v in value]
    if isinstance(value, str) and "@" in value and "://" in value:
        scheme, rest = value.split("://", 1)
        return f"{scheme}://<credentials>@{rest.split('@', 1)[1]}"
    return value


_LIST_FIELDS = {
    "endpoints",
    "gates",
    "suite_files",
    "server_log",
    "dcgm",
    "ignore_xid",
    "server_pid",
}
# server_log_cmd: one command per variable (a command holds commas and spaces).


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``SOAKTOP_<FIELD>`` variables for known fields (lists are comma-separated)."""
    out: dict[str, Any] = {}
    for name in RunConfig.model_fields:
        raw = environ.get(f"SOAKTOP_{name.upper()}")
        if raw is None:
            continue
        if name == "server_log_cmd":
            out[name] = [raw]
        elif name == "thresholds":  # an expression holds commas (",abort"): split on ";"
            out[name] = [s.strip() for s in raw.split(";") if s.strip()]
        elif name in _LIST_FIELDS:
            out[name] = [s.strip() for s in raw.split(",") if s.strip()]
        else:
            out[name] = raw
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """The ``[run]`` table of a TOML file, or its top level when there is no such table."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None
    table = data.get("run", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {str(path)!r}: [run] must be a table")
    return table


def load_config(
    cli: Mapping[str, Any],
    *,
    toml_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    base: Mapping[str, Any] | None = None,
) -> RunConfig:
    """Merge ``base`` < TOML < environment < CLI (``None`` CLI values are "not given")."""
    merged: dict[str, Any] = dict(base or {})
    src = ""
    if toml_path is not None:
        merged.update(read_toml(toml_path))
        src = f" (config file {toml_path}, environment or command line)"
    merged.update(env_overrides(os.environ if environ is None else environ))
    merged.update({k: v for k, v in cli.items() if v is not None})
    if merged.get("max_requests") is not None and "duration_s" not in merged:
        merged["duration_s"] = None  # a request count alone ends the window, not the 60 s default
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, src)) from None
