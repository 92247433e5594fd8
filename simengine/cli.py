"""``python -m simengine``: run a simulated vLLM deployment until SIGTERM/SIGINT.

Process contract: once every replica listens, the ready JSON is written atomically to
``--ready-file`` (temporary file + rename) and printed as one stdout line::

    {"pid": 123, "replicas": [{"index": 0, "url": "http://127.0.0.1:PORT",
      "dcgm_url": "http://127.0.0.1:PORT2/metrics", "log": "/abs/replica0.log",
      "model": "tiny-sim"}, ...], "scenario": "healthy"}

SIGTERM or SIGINT stop it cleanly with exit status 0; a bad flag exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import ValidationError

from simengine.config import SimConfig
from simengine.faults import SCENARIO_NOTES, SCENARIOS, FaultRule
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
        ("log-interval-s", float),
        ("death-health-s", float),
        ("version-string", str),
        ("hostname", str),
    ):
        field = d[name.replace("-", "_")]
        a(f"--{name}", type=typ, default=None,
          help=f"{(field.description or '').strip()} (default: {field.default})")  # fmt: skip
    notes = "; ".join(f"{name}: {text}" for name, text in SCENARIO_NOTES.items())
    a("--scenario", choices=SCENARIOS, default="healthy",
      help=f"named fault scenario ({notes})")  # fmt: skip
    a("--fault", action="append", default=[], metavar="JSON",
      help='a fault rule, e.g. \'{"match": "*/after/json/*", "action": "http_500"}\' or '
           '\'{"match": "*/tools/4", "action": "tool_wrong_function", "count": 0}\'')  # fmt: skip
    a("--faults-file", type=Path, help="a JSON file holding a list of fault rules")
    a("--log-dir", type=Path, help="directory for replica<i>.log (default: a temp dir)")
    a("--ready-file", type=Path, help="write the ready JSON here (atomically)")
    return p


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """A validated config from parsed flags (raises ValueError with the reason)."""
    values: dict[str, object] = {}
    for key, value in vars(ns).items():
        if value is not None and key not in ("fault", "faults_file"):
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


async def serve(cfg: SimConfig) -> None:
    """Run until SIGTERM/SIGINT, announcing readiness on stdout and the ready file."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
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
    try:
        asyncio.run(serve(cfg))
    except OSError as e:
        print(f"simengine: cannot listen: {e}", file=sys.stderr)
        return 2
    return 0
