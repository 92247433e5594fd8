"""``python -m simengine``: run a simulated vLLM deployment until SIGTERM/SIGINT.

Process contract: once every replica listens, the ready JSON is written atomically to
``--ready-file`` (temporary file + rename) and printed as one stdout line::

    {"pid": 123, "replicas": [{"index": 0, "url": "http://127.0.0.1:PORT",
      "dcgm_url": "http://127.0.0.1:PORT2/metrics", "log": "/abs/replica0.log",
      "model": "tiny-sim"}, ...], "scenario": "healthy"}

SIGTERM or SIGINT stop it cleanly with exit status 0; a bad flag exits 2. With
``--parent-fd FD`` it also stops when its parent ends, however the parent ends
(:mod:`simengine.lifeline`); with ``--remove-log-dir`` it removes ``--log-dir`` once it
has stopped serving (the caller copies what it keeps first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import ValidationError

from simengine.config import SimConfig
from simengine.faults import SCENARIO_NOTES, SCENARIOS, FaultRule
from simengine.lifeline import check_fd, watch_parent
from simengine.server import Sim


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (flags mirror :class:`SimConfig` fields)."""
    d = SimConfig.model_fields
    p = argparse.ArgumentParser(
        prog="simengine",
        description="A simulated vLLM 0.32 deployment on loopback: OpenAI API, vLLM "
        "/metrics, DCGM-style GPU metrics and fault injection. No model, no GPU.",
    )
    a = p.add_argument
    a("--host", default=d["host"].default, help="listen address (loopback unless --allow-remote)")
    a("--port", type=int, default=0,
      help="0: free ports; P: replica i on P+i, its DCGM exporter on P+100+i")  # fmt: skip
    a("--allow-remote", action="store_true", help="allow a non-loopback --host")
    for name, typ in (
        ("replicas", int),
        ("gpus-per-replica", int),
        ("model", str),
        ("max-model-len", int),
        ("max-num-seqs", int),
        ("max-num-queued-reqs", int),
        ("max-num-batched-tokens", int),
        ("num-gpu-blocks", int),
        ("block-size", int),
        ("prefill-us-per-token", float),
        ("decode-ms-base", float),
        ("decode-ms-per-seq", float),
        ("mean-output-tokens", float),
        ("default-max-tokens", int),
        ("reasoning-tokens", int),
        ("tool-call-probability", float),
        ("parallel-tool-call-probability", float),
        ("seed", int),
        ("scenario-at", float),
        ("scenario-speed", float),
        ("log-interval-s", float),
        ("death-health-s", float),
        ("version-string", str),
        ("hostname", str),
        ("gpu-memory-utilization", float),
    ):
        field = d[name.replace("-", "_")]
        a(f"--{name}", type=typ, default=None,
          help=f"{(field.description or '').strip()} (default: {field.default})")  # fmt: skip
    # argparse %-formats help texts: a note's "0.4 %/s" must reach it as "%%".
    notes = "; ".join(f"{name}: {text}" for name, text in SCENARIO_NOTES.items())
    notes = notes.replace("%", "%%")
    a("--scenario", choices=SCENARIOS, default="healthy",
      help=f"named fault scenario ({notes})")  # fmt: skip
    a("--noise", action="store_true", default=None,
      help="realistic noise from the first load request: lognormal jitter of every "
           "engine step (TTFT, ITL) and a GC-like sawtooth of the process memory")  # fmt: skip
    a("--no-server-info", action="store_false", dest="server_info", default=None,
      help="answer GET /server_info with 404, as production vLLM does (default: the "
           "VLLM_SERVER_DEV_MODE=1 JSON of the configuration)")  # fmt: skip
    a("--fault", action="append", default=[], metavar="JSON",
      help='a fault rule, e.g. \'{"match": "*/after/json/*", "action": "http_500"}\' or '
           '\'{"match": "*/tools/4", "action": "tool_wrong_function", "count": 0}\'')  # fmt: skip
    a("--faults-file", type=Path, help="a JSON file holding a list of fault rules")
    a("--log-dir", type=Path, help="directory for replica<i>.log (default: a temp dir)")
    a("--tls-cert", type=Path, help="serve the API over TLS with this PEM certificate")
    a("--tls-key", type=Path, help="the TLS certificate's PEM private key")
    a("--tls-client-ca", type=Path, help="require client certificates signed by this CA")
    a("--require-header", action="append", dest="require_headers", metavar="'NAME: VALUE'",
      help="a header every API request must carry (else 401); repeatable")  # fmt: skip
    a("--ready-file", type=Path, help="write the ready JSON here (atomically)")
    a("--parent-fd", type=int, metavar="FD",
      help="the read end of a pipe whose write end only the parent holds: stop when it "
           "reaches end-of-file (the parent ended, even by kill -9)")  # fmt: skip
    a("--parent-grace", type=float, default=0.0, metavar="S",
      help="after the parent's pipe closed, serve S seconds more before stopping (what "
           "the parent started can finish first)")  # fmt: skip
    a("--remove-log-dir", action="store_true",
      help="remove --log-dir after serving (the caller owns nothing left in it)")  # fmt: skip
    return p


_PROCESS_FLAGS = ("fault", "faults_file", "parent_fd", "parent_grace", "remove_log_dir")
"""Flags about this process rather than the simulated deployment (not SimConfig fields)."""


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """A validated config from parsed flags (raises ValueError with the reason)."""
    values: dict[str, object] = {}
    for key, value in vars(ns).items():
        if value is not None and key not in _PROCESS_FLAGS:
            values[key] = value
    rules: list[FaultRule] = []
    if ns.faults_file is not None:
        data = orjson.loads(Path(ns.faults_file).read_bytes())
        rules += [FaultRule.model_validate(r) for r in (data if isinstance(data, list) else [data])]
    rules += [FaultRule.model_validate_json(text) for text in ns.fault]
    values["faults"] = rules
    return SimConfig.model_validate(values)


def write_ready(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically (readers never see half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(payload + b"\n")
    os.replace(tmp, path)


async def serve(cfg: SimConfig, parent_fd: int | None = None, parent_grace_s: float = 0.0) -> None:
    """Run until SIGTERM/SIGINT (or ``parent_grace_s`` after the parent's pipe
    ``parent_fd`` closed), announcing readiness on stdout and the ready file."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if parent_fd is not None:
        watch_parent(loop, parent_fd, lambda: loop.call_later(parent_grace_s, stop.set))
    sim = Sim(cfg)
    await sim.start()
    try:
        payload = orjson.dumps(sim.ready_info())
        if cfg.ready_file is not None:
            write_ready(cfg.ready_file, payload)
        sys.stdout.write(payload.decode() + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await sim.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 after a signal, 2 for bad arguments)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        cfg = config_from_args(ns)
    except (ValidationError, ValueError, OSError) as e:
        print(f"simengine: {e}", file=sys.stderr)
        return 2
    if ns.parent_fd is not None and (problem := check_fd(ns.parent_fd)):
        print(f"simengine: {problem}", file=sys.stderr)
        return 2
    if not 0 <= ns.parent_grace <= 60:  # also refuses nan
        print(f"simengine: --parent-grace {ns.parent_grace}: allowed 0 to 60 s", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(cfg, ns.parent_fd, ns.parent_grace))
    except OSError as e:
        print(f"simengine: cannot listen: {e}", file=sys.stderr)
        return 2
    if ns.remove_log_dir and cfg.log_dir is not None:
        shutil.rmtree(cfg.log_dir, ignore_errors=True)
    return 0
