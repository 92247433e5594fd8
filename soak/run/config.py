"""Run configuration: one pydantic model, layered CLI > ``SOAKTOP_*`` env > TOML > defaults.

Every field has a docstring (it is the CLI and TOML reference) and a bounded range
(:func:`allowed` says it in words, for errors, ``--help`` and the README): floats are
finite, whole numbers and lists have upper bounds, URLs are http(s) with a host and a
port in 1–65535, files exist and parse. Unknown keys are errors. A bad value produces a
sentence naming the field, where it came from (flag, ``SOAKTOP_*`` variable or config
file), the value and what is allowed, and the CLI exits 2 before any run directory exists.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


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
_NAME = r"^[A-Za-z0-9._-]+$"


class RunConfig(BaseModel):
    """Everything that defines one soak run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    endpoints: list[Annotated[str, Field(max_length=2048)]] = Field(
        min_length=1, max_length=MAX_LIST
    )
    """Base URLs of the OpenAI-compatible servers (one per replica), e.g. http://127.0.0.1:8000."""
    model: str = Field(min_length=1, max_length=256)
    """Served model name sent in every request (must be listed by /v1/models)."""
    api: Literal["chat", "completions"] = "chat"
    """Which streaming API the load uses: /v1/chat/completions or /v1/completions."""
    concurrency: int = Field(32, ge=1, le=100_000)
    """Closed-loop workers: each sends its next request when its last one ends."""
    duration_s: float | None = Field(60.0, gt=0, le=LONGEST_S)
    """Issue window in seconds (the drain comes after it)."""
    max_requests: int | None = Field(None, ge=1, le=1_000_000_000)
    """Stop issuing after this many requests (with or instead of duration_s)."""
    max_tokens: int = Field(256, ge=1, le=10_000_000)
    """max_tokens of every load request."""
    ignore_eos: bool = False
    """Send ignore_eos so every request generates exactly max_tokens (vLLM extension)."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature; unset leaves the server default. No per-request seed is ever sent."""
    prompts: Path | None = None
    """Prompt file: ShareGPT JSON (from/value or role/content) or JSONL of {"prompt": ...}."""
    synthetic_input_tokens: int | None = Field(None, ge=1, le=10_000_000)
    """Synthetic prompts of about this many tokens (calibrated with the server's /tokenize)."""
    pool_size: int = Field(256, ge=1, le=1_000_000)
    """Synthetic prompts in the pool; for files, at most this many are used."""
    pool_seed: int = Field(0, ge=0, le=2**63 - 1)
    """Seed for the prompt order and synthetic text (match it across A/B/A arms)."""
    shared_prefix: bool = False
    """Synthetic prompts only: let requests share prefixes (by default each gets a unique one)."""
    label: str = Field("run", pattern=_NAME, max_length=64)
    """Short label in the run id, e.g. baseline-s32."""
    purpose: str = Field("soak", pattern=_NAME, max_length=64)
    """Purpose in the run id, e.g. reliability."""
    engine: str | None = Field(None, pattern=_NAME, max_length=64)
    """Engine name for the run id; detected from the server when unset."""
    out: Path = Path("runs")
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
    interval_s: float = Field(10.0, ge=0.1, le=DAY_S)
    """Headless mode: seconds between printed status lines."""
    percentile_method: Literal["nearest-rank", "linear"] = "nearest-rank"
    """Record percentiles: nearest-rank (an observed value) or linear (numpy, vllm bench)."""
    max_failures: int = Field(0, ge=0, le=1_000_000_000)
    """Load request failures tolerated before the run FAILS (default: none)."""
    max_loop_lag_s: float = Field(0.5, gt=0, le=3600)
    """Client event-loop lag (p99 over the load) above which latencies are the client's: INVALID."""
    headless: bool = False
    """Never open the Textual monitor; print status lines instead."""
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    """Name of an environment variable holding the API key (the key never reaches disk);
    it must be set and non-empty when the run starts."""
    redact: bool = False
    """Drop endpoints, hostnames and paths from everything written to the run directory."""
    gates: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=lambda: ["json", "tools"], max_length=64
    )
    """Probe suites run before and after the load (built in: json, tools, stream-tools,
    tool-result, smoke, needle); empty runs no gates."""
    suite_files: list[Path] = Field(default_factory=list, max_length=MAX_LIST)
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
    dcgm: list[Annotated[str, Field(max_length=2048)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """DCGM exporter /metrics URLs (one per GPU node): GPU memory, utilisation, temperature,
    power, throttling, Xid and ECC faults."""
    server_log: list[Path] = Field(default_factory=list, max_length=MAX_LIST)
    """Server log file(s), one per replica: followed for fault lines (CUDA errors, Xid,
    NCCL, engine death, tracebacks), and excerpts go into failed probes' evidence. A file
    may appear after the start (it is waited for), but its directory must exist."""
    server_log_cmd: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    """Commands whose output is a server log, e.g. "docker logs -f --since 0s vllm" or
    "journalctl -f -u vllm" (followed like server_log; the program must be on PATH)."""

    matrix: str | None = Field(None, max_length=4096)
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
    server_pid: list[Pid] = Field(default_factory=list, max_length=MAX_LIST)
    """PIDs of server processes on this host whose CPU and memory are sampled (host telemetry)."""
    telemetry_interval_s: float = Field(1.0, ge=0.1, le=60)
    """Sampling interval of the engine /metrics, GPU and host sources."""
    max_client_cpu_percent: float = Field(95.0, gt=0, le=1000)
    """Runner CPU (percent of one core, where its event loop runs) above which, held for
    client_overload_s, the client could not keep up: the run is INVALID."""
    client_overload_s: float = Field(10.0, gt=0, le=LONGEST_S)
    """How long client CPU over max_client_cpu_percent must last to make the run INVALID."""
    require_telemetry: list[str] = Field(default_factory=list, max_length=5)
    """Telemetry kinds that must cover the load (engine, gpu, health, log, host): one that
    answered less than half its expected samples FAILS the run (else it is a note)."""

    @field_validator("require_telemetry", mode="before")
    @classmethod
    def _check_required(cls, v: Any) -> Any:
        from soak.judge.coverage import parse_required

        if isinstance(v, str):
            v = v.split(",")
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return v  # pydantic's own error names the type
        return parse_required([x for x in v if x.strip()])

    @model_validator(mode="after")
    def _check_required_sources(self) -> RunConfig:
        if "gpu" in self.require_telemetry and not self.gpu_telemetry:
            raise ValueError(
                "require_telemetry names gpu but no GPU source is configured (nvml is off "
                "and no dcgm URL): drop gpu or give --dcgm URL / drop --no-nvml"
            )
        if "log" in self.require_telemetry and not (self.server_log or self.server_log_cmd):
            raise ValueError(
                "require_telemetry names log but no server log is followed: give "
                "--server-log PATH or --server-log-cmd CMD, or drop log"
            )
        return self

    @field_validator("endpoints")
    @classmethod
    def _check_endpoints(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            if (why := url_problem(url)) is not None:
                raise ValueError(why)
            out.append(url.rstrip("/").removesuffix("/v1"))
        return out

    @field_validator("dcgm")
    @classmethod
    def _check_dcgm(cls, v: list[str]) -> list[str]:
        for url in v:
            if (why := url_problem(url, example="http://gpu-node:9400/metrics")) is not None:
                raise ValueError(why)
        return v

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
            if _which(argv[0]) is None:
                raise ValueError(f"{cmd!r}: the program {argv[0]!r} is not found on PATH")
        return v

    @field_validator("prompts")
    @classmethod
    def _check_prompts(cls, v: Path | None) -> Path | None:
        if v is not None and (why := file_problem(v)) is not None:
            raise ValueError(f"prompts file {str(v)!r} {why}")
        return v

    @field_validator("suite_files")
    @classmethod
    def _check_suite_files(cls, v: list[Path]) -> list[Path]:
        for path in v:
            if (why := file_problem(path)) is not None:
                raise ValueError(f"suite file {str(path)!r} {why}")
        return v

    @field_validator("server_log")
    @classmethod
    def _check_server_logs(cls, v: list[Path]) -> list[Path]:
        # The engine may create its log after soaktop starts (it is waited for), so only
        # an existing path must be a readable file; a missing one needs its directory.
        for path in v:
            why = _log_problem(path)
            if why is not None:
                raise ValueError(f"server log {str(path)!r} {why}")
        return v

    @field_validator("out")
    @classmethod
    def _check_out(cls, v: Path) -> Path:
        if (why := _out_problem(v)) is not None:
            raise ValueError(f"{str(v)!r} {why}")
        return v

    @model_validator(mode="after")
    def _check_thresholds(self) -> RunConfig:
        from soak.judge.thresholds import ThresholdError, parse_thresholds

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
        from soak.watch.host import check_server_pid

        for pid in v:
            if (why := check_server_pid(pid)) is not None:
                raise ValueError(f"{pid}: {why}")
        return v

    @field_validator("matrix")
    @classmethod
    def _check_matrix(cls, v: str | None) -> str | None:
        from soak.record.matrix import MatrixError, parse_matrix

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


# --- the checks behind the validators ---------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")


def url_problem(url: str, example: str = "http://127.0.0.1:8000") -> str | None:
    """Why ``url`` is not an http(s) URL soaktop can use (None: it is): a scheme, a host,
    a port in 1–65535, no credentials, query or fragment; a path prefix is allowed."""
    if _CONTROL.search(url):
        return f"{url!r} holds a space or control character; give a URL like {example}"
    try:
        parts = urlsplit(url)
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        return f"{url!r} is not a URL ({e}); give one like {example}"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{url!r} is not an http(s) URL like {example}"
    if parts.username is not None or parts.password is not None:
        return (
            "credentials inside an endpoint URL would be written to the run directory; "
            "give the key with --api-key-env VAR instead"
        )
    if not parts.hostname:
        return f"{url!r} has no host; give a URL like {example}"
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        given = parts.netloc.rsplit(":", 1)[-1]
        return f"{url!r}: port {given!r} is not a port number (allowed: 1 to 65535)"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return f"{url!r} holds a query or fragment; give the base URL only, like {example}"
    return None


def file_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable regular file (None: it is), as the end of a sentence."""
    try:
        if not path.exists():
            return "does not exist"
        if path.is_dir():
            return "is a directory, not a file"
        if not os.access(path, os.R_OK):
            return "cannot be read (permission denied)"
    except (OSError, ValueError) as e:
        return f"is not a usable path ({e})"
    return None


def _log_problem(path: Path) -> str | None:
    try:
        if path.exists():
            return file_problem(path)
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            return f"does not exist and neither does its directory {str(parent)!r}"
    except (OSError, ValueError) as e:
        return f"is not a usable path ({e})"
    return None


def _out_problem(path: Path) -> str | None:
    """The output directory: an existing one must be a writable directory; a new one
    needs its nearest existing ancestor to be one (the runner creates the rest)."""
    try:
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if not probe.is_dir():
            where = "" if probe == path else f" ({str(probe)!r} is a file)"
            return f"is not a directory{where}"
        if not os.access(probe, os.W_OK | os.X_OK):
            return f"cannot be written ({str(probe)!r}: permission denied)"
    except (OSError, ValueError) as e:
        return f"is not a usable directory ({e})"
    return None


def _which(program: str) -> str | None:
    try:
        return shutil.which(program)
    except (OSError, ValueError):
        return None


# --- what a field allows, in words ------------------------------------------------------

_PATTERNS = {
    _NAME: "letters, digits, '.', '_' and '-'",
    r"^[a-z]+$": "lowercase letters",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an environment variable name (letters, digits and '_', "
    "not starting with a digit)",
}
_SPANS = {LONGEST_S: "30 days", DAY_S: "1 day", 3600: "1 hour"}


def _num(x: float, seconds: bool) -> str:
    text = f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
    span = _SPANS.get(float(x)) if seconds else None
    return f"{text} ({span})" if span else text


def _constraints(meta: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in meta:
        if isinstance(m, Ge):
            out["ge"] = m.ge
        elif isinstance(m, Gt):
            out["gt"] = m.gt
        elif isinstance(m, Le):
            out["le"] = m.le
        elif isinstance(m, Lt):
            out["lt"] = m.lt
        elif isinstance(m, MaxLen):
            out["max_len"] = m.max_length
        elif getattr(m, "pattern", None):
            out["pattern"] = m.pattern
        elif hasattr(m, "metadata"):  # a FieldInfo inside Annotated[...]
            out |= _constraints(list(m.metadata))
    return out


def _describe(ann: Any, meta: list[Any], seconds: bool) -> str:
    """The type ``ann`` with constraints ``meta`` in words."""
    optional = False
    if type(None) in get_args(ann) and get_origin(ann) is not Literal:
        optional = True
        ann = next(a for a in get_args(ann) if a is not type(None))
    if get_origin(ann) is Annotated:
        ann, *more = get_args(ann)
        meta = [*meta, *more]
    c = _constraints(meta)
    origin = get_origin(ann)
    if origin is list:
        item = _describe(get_args(ann)[0], [], seconds)
        text = f"a list of at most {c.get('max_len', MAX_LIST)}, each {item}"
    elif origin is Literal:
        text = "one of " + ", ".join(repr(a) for a in get_args(ann))
    elif ann is bool:
        text = "true or false"
    elif ann is int:
        lo = c.get("ge", c["gt"] + 1 if "gt" in c else None)
        text = "a whole number"
        if lo is not None and "le" in c:
            text += f" from {_num(lo, False)} to {_num(c['le'], False)}"
        elif lo is not None:
            text += f" of at least {_num(lo, False)}"
    elif ann is float:
        parts = []
        if "gt" in c:
            parts.append(f"above {_num(c['gt'], seconds)}")
        elif "ge" in c:
            parts.append(f"at least {_num(c['ge'], seconds)}")
        if "le" in c:
            parts.append(f"at most {_num(c['le'], seconds)}")
        text = "a finite number" + (" of seconds" if seconds else "")
        text += (" " + " and ".join(parts)) if parts else ""
    elif ann is Path:
        text = "a path"
    else:
        text = "text"
        if "pattern" in c:
            text += f" of {_PATTERNS.get(c['pattern'], 'the form ' + c['pattern'])}"
        if "max_len" in c:
            text += f", at most {c['max_len']} characters"
    return f"{text}, or unset" if optional else text


_IN_WORDS = {
    "endpoints": "1 to 256 http(s) URLs, each with a host and a port from 1 to 65535, "
    "no credentials, query or fragment",
    "dcgm": "up to 256 http(s) URLs, each with a host and a port from 1 to 65535",
    "prompts": "an existing, readable ShareGPT JSON or JSONL file, or unset",
    "suite_files": "up to 256 existing, readable suite files (JSON)",
    "server_log": "up to 256 paths: readable files, or files yet to appear in an existing "
    "directory",
    "server_log_cmd": "up to 256 command lines whose program is on PATH",
    "out": "a directory (created if missing) that can be written",
    "canary_interval_s": "0 (no canaries), or a finite number of seconds above 0 and at "
    "most 2,592,000 (30 days)",
    "max_client_cpu_percent": "a finite percentage of one core, above 0 and at most 1,000",
    "require_telemetry": "a comma-separated list of engine, gpu, health, log, host "
    "(empty: none required)",
}


def allowed(name: str) -> str:
    """What field ``name`` accepts, in words, e.g. ``a whole number from 1 to 100,000``
    (the error messages, the ``--help`` texts and the README's ranges say the same)."""
    if name in _IN_WORDS:
        return _IN_WORDS[name]
    f = RunConfig.model_fields[name]
    return _describe(f.annotation, list(f.metadata), name.endswith("_s"))


# --- errors in words --------------------------------------------------------------------

_RANGE_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
    "int_parsing",
    "int_parsing_size",
    "int_type",
    "int_from_float",
    "float_parsing",
    "float_type",
    "bool_parsing",
    "bool_type",
    "string_type",
    "string_too_long",
    "string_too_short",
    "string_pattern_mismatch",
    "too_long",
    "too_short",
    "list_type",
    "path_type",
    "missing",
}


def format_validation_error(
    err: ValidationError, source: str = "", origins: Mapping[str, str] | None = None
) -> str:
    """One line per problem: the field, where its value came from, the value given and
    what is allowed."""
    lines = []
    for e in err.errors():
        loc = e["loc"]
        top = str(loc[0]) if loc else ""
        field = top + "".join(f"[{p}]" for p in loc[1:]) if loc else "config"
        where = f" ({origins[top]})" if origins and top in origins else source
        if e["type"] == "extra_forbidden":
            allowed_keys = ", ".join(sorted(RunConfig.model_fields))
            lines.append(f"unknown key {field!r}{where}; allowed keys: {allowed_keys}")
            continue
        value = _mask_userinfo(e.get("input"))
        shown = "" if isinstance(value, dict) or e["type"] == "missing" else f" = {_shown(value)}"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = "is required"
        if e["type"] in _RANGE_ERRORS and top in RunConfig.model_fields:
            msg += f" (allowed: {allowed(top)})"
        lines.append(f"{field}{shown}{where}: {msg}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    """``repr`` of a value for an error line, bounded (a megabyte string or a 10,000-digit
    number is named by its size, not printed)."""
    text = repr(_plain(value))
    return text if len(text) <= 200 else f"{text[:160]}… ({len(text)} characters)"


class _Huge(int):
    """A number too long to print (Python refuses ``repr`` past 4,300 digits)."""

    def __repr__(self) -> str:
        return f"<a number of about {int(self.bit_length() * math.log10(2)) + 1} digits>"


def _plain(value: Any) -> Any:
    """Paths shown as the strings the operator typed, not ``PosixPath('...')``; numbers
    too long to print named by their size."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return _Huge(value)
    return str(value) if isinstance(value, Path) else value


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
    "require_telemetry",
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
    if (why := file_problem(path)) is not None:
        raise ConfigError(f"config file {str(path)!r} {why}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {str(path)!r} is not valid TOML: not UTF-8 text at byte {e.start}"
        ) from None
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
    cli_flags: Mapping[str, str] | None = None,
) -> RunConfig:
    """Merge ``base`` < TOML < environment < CLI (``None`` CLI values are "not given"),
    validate every field and check what must hold when the run starts (the API key's
    variable is set, the prompt file parses). Raises :class:`ConfigError` only.

    ``cli_flags`` maps a field to the flag that set it, so an error names ``--flag``.
    """
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = dict(base or {})
    origins: dict[str, str] = {}
    if toml_path is not None:
        table = read_toml(toml_path)
        merged.update(table)
        origins |= dict.fromkeys(table, f"config file {toml_path}")
    overrides = env_overrides(env)
    merged.update(overrides)
    origins |= {k: f"SOAKTOP_{k.upper()}" for k in overrides}
    given = {k: v for k, v in cli.items() if v is not None}
    merged.update(given)
    origins |= {k: (cli_flags or {}).get(k, "command line") for k in given}
    if merged.get("max_requests") is not None and "duration_s" not in merged:
        merged["duration_s"] = None  # a request count alone ends the window, not the 60 s default
    try:
        cfg = RunConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, origins=origins)) from None
    _check_start(cfg, env, origins)
    return cfg


def _check_start(cfg: RunConfig, environ: Mapping[str, str], origins: Mapping[str, str]) -> None:
    """What only the starting CLI can check: its environment and the prompt file's content
    (parsed here as the runner will, so a bad file never gets as far as the runner)."""
    if cfg.api_key_env is not None and not environ.get(cfg.api_key_env):
        state = "is empty" if cfg.api_key_env in environ else "is not set"
        where = origins.get("api_key_env", "config")
        raise ConfigError(
            f"api_key_env = {cfg.api_key_env!r} ({where}): the environment variable "
            f"{cfg.api_key_env} {state}; export it holding the API key, or drop the option"
        )
    if cfg.prompts is not None:
        from loadgen.prompts import PromptPoolError, load_file

        try:
            load_file(cfg.prompts, seed=cfg.pool_seed, limit=cfg.pool_size)
        except PromptPoolError as e:
            raise ConfigError(f"prompts = {str(cfg.prompts)!r}: {e}") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ConfigError(f"prompts file {str(cfg.prompts)!r} cannot be used: {e}") from None
