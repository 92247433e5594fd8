"""Shared helpers for the probe tests: a fast simulated engine process, suites, a sink."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from probes.gates import GatePlan, GateRunner
from probes.probe import ProbeOptions, ProbeSender
from probes.probe_record import Exchange, ProbeResult
from probes.suite import Suite, Task, builtin_suite, load_suites
from soak.cli.demo import SimHandle, cleanup, simulated_engine

FAST_ARGS = [
    "--decode-ms-base",
    "1",
    "--decode-ms-per-seq",
    "0",
    "--prefill-us-per-token",
    "0",
    "--max-num-seqs",
    "128",
]


def fault(match: str, action: str, **kw: Any) -> list[str]:
    """``--fault JSON`` for one rule (``count: 0`` unless given: every matching request)."""
    rule = {"match": match, "action": action, "count": 0} | kw
    return ["--fault", orjson.dumps(rule).decode()]


@contextlib.contextmanager
def fast_sim(*rules: list[str], replicas: int = 1) -> Iterator[SimHandle]:
    """``python -m simengine`` on loopback, fast decode, with the given fault rules."""
    args = [*FAST_ARGS, *(a for r in rules for a in r)]
    handle: SimHandle | None = None
    try:
        with simulated_engine(replicas=replicas, gpus_per_replica=1, extra_args=args) as sim:
            handle = sim
            yield sim
    finally:
        if handle is not None:
            cleanup(handle)


def replica_log(sim: SimHandle, index: int = 0) -> str:
    """The text of one replica's server log."""
    return Path(sim.ready["replicas"][index]["log"]).read_text(errors="replace")


def seen_request_ids(sim: SimHandle, index: int = 0) -> set[str]:
    """Every X-Request-Id the replica's access log answered."""
    out = set()
    for line in replica_log(sim, index).splitlines():
        _, sep, rid = line.partition("X-Request-Id: ")
        if sep:
            out.add(rid.strip())
    return out


def one_task(name: str, n: int = 1) -> Suite:
    """Built-in suite ``name`` cut down to its first ``n`` tasks (ids keep their index)."""
    base = load_suites([name], [])[name]
    return base.model_copy(update={"tasks": base.tasks[:n], "tasks_from": None})


def needle_suite(needle: str, context_tokens: int, max_tokens: int = 32) -> Suite:
    """A one-task needle suite (what a user's ``--suite FILE`` would hold)."""
    return Suite.model_validate(
        {
            "suite": "needle",
            "kind": "needle",
            "defaults": {"max_tokens": max_tokens, "temperature": 0},
            "tasks": [{"id": "code", "needle": needle, "context_tokens": context_tokens}],
        }
    )


def first_tasks(name: str, n: int) -> list[Task]:
    """The first ``n`` tasks of a built-in suite."""
    return builtin_suite(name).tasks[:n]


@dataclass
class Sink:
    """Collects every attempt the runner reports."""

    seen: list[tuple[ProbeResult, list[Exchange]]] = field(default_factory=list)

    def __call__(self, result: ProbeResult, exchanges: list[Exchange]) -> None:
        self.seen.append((result, list(exchanges)))

    @property
    def results(self) -> list[ProbeResult]:
        return [r for r, _ in self.seen]


def make_runner(
    client: httpx.AsyncClient,
    endpoints: list[str],
    suites: dict[str, Suite],
    run_id: str,
    *,
    model: str = "tiny-sim",
    retries: int = 0,
    concurrency: int = 8,
    timeout_s: float = 10.0,
    max_model_len: int | None = None,
) -> tuple[GateRunner, Sink]:
    """A GateRunner over ``client`` whose results land in the returned sink."""
    plan = GatePlan(
        run_id=run_id,
        endpoints=endpoints,
        suites=suites,
        origin_ns=time.perf_counter_ns(),
        concurrency=concurrency,
        retries=retries,
    )
    opts = ProbeOptions(model=model, timeout_s=timeout_s, max_model_len=max_model_len)
    sink = Sink()
    return GateRunner(plan, ProbeSender(client, opts), sink), sink


def closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
