"""``--ray ADDRESS --shards N``: the shards of a sharded run on N hosts of a Ray cluster.

Ray is the control plane only, never the measuring path (DESIGN.md §10): before any load,
:func:`ray_preflight` reserves one host per shard (a ``STRICT_SPREAD`` placement group
whose every bundle asks for the custom resource :data:`SHARD_RESOURCE`, so shards stay
off the nodes that do not offer it, GPU nodes say) or refuses the run in words. Each
shard is then one small actor (:class:`soak.run.ray_host.ShardHost`) that starts the
ordinary shard process on its node; :class:`RayShardProcess` stands on the coordinator
for that process, with the surface :class:`soak.run.shards.ShardedGenerator` drives a
local child by (stdin, stdout, stderr, wait, kill), so the barrier, the window, the
drain, every control and the merged record are the local path's. The bytes move in
batches: one Ray call per command, one long poll per ~100–250 ms of results.

Each shard's clock is measured against the coordinator's at its start and at its end
(:data:`CLOCK_PROBES` round trips: offset = remote − midpoint of the fastest one,
uncertainty = half its round trip); the start offset shifts its results onto the run's
timeline. The node tees the shard's stdout into a journal there; its sha256 and line
count are compared with what the coordinator received (the record's ``shards[]``).

Ray is an optional extra (``soaktop[distributed]``): nothing here imports it at the top.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from soak.record.models import ShardInfo
from soak.run.shard_links import ShardLink, ShardProcess
from soak.run.shard_protocol import READ_LIMIT
from soak.safe_text import safe_line

if TYPE_CHECKING:
    from soak.run.state import RunState

SHARD_RESOURCE: Final = "soaktop_shard"
"""The custom resource a node offers (``ray start --resources '{"soaktop_shard": 1}'``)
to take one shard."""
EXTRA: Final = "pip install 'soaktop[distributed]'"
CONNECT_TIMEOUT_S: Final = 20.0
"""How long connecting to the cluster may take before the run is refused."""
PLACE_TIMEOUT_S: Final = 10.0
"""How long the placement group may take to place before the run is refused."""
POLL_WAIT_S: Final = 0.25
"""A read's long poll: the most a batch of results waits on its node."""
LOST_AFTER_S: Final = 5.0
"""A poll unanswered this long (beyond its own wait): the shard's host is lost."""
CLOCK_PROBES: Final = 8
SEND_CHUNK: Final = 64 << 10
"""Most bytes of one command call. Ray inlines a call's arguments below 100 KiB
(``max_direct_call_object_size``) in the call itself; a larger one goes through the
object store, which may spill it to disk. The spec carries the run's headers (an API
key): cut in pieces this size, it never enters the object store."""
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})


def ray_missing(address: str) -> str | None:
    """Words for ``--ray`` where Ray is not installed (None: it is)."""
    if importlib.util.find_spec("ray") is not None:
        return None
    return f"ray = {address!r} needs Ray, which is not installed: {EXTRA}"


def _ray(address: str) -> Any:
    """Ray, imported for ``address``. A loopback cluster (tests, one machine) must be
    reached on loopback: Ray otherwise swaps 127.0.0.1 for the host's routable address,
    where a loopback-bound cluster does not listen."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in LOOPBACK:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    return ray


async def _get(ref: Any, limit_s: float) -> Any:
    """A Ray object ref's value on this loop (any loop: uvloop too), or TimeoutError."""
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), limit_s)


@dataclass
class ClockOffset:
    """One offset measurement: the shard's clock minus the coordinator's."""

    offset_ns: int
    uncertainty_ns: int


async def measure_clock(actor: Any, probes: int = CLOCK_PROBES) -> ClockOffset:
    """The offset from the fastest of ``probes`` round trips to the actor's clock."""
    best: tuple[int, int] | None = None
    for _ in range(probes):
        t0 = time.perf_counter_ns()
        remote = int(await _get(actor.clock.remote(), LOST_AFTER_S))
        t1 = time.perf_counter_ns()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, remote - (t0 + t1) // 2)
    assert best is not None
    return ClockOffset(offset_ns=best[1], uncertainty_ns=best[0] // 2)


@dataclass
class RayShardFacts:
    """What the record lists of one shard on Ray, beyond the local path's figures."""

    node_id: str = ""
    ip: str = ""
    pid: int = 0
    journal: str = ""
    start: ClockOffset | None = None
    end: ClockOffset | None = None
    journal_sha256: str | None = None
    journal_lines: int | None = None
    received_sha256: str | None = None
    received_lines: int = 0
    lost_why: str | None = None
    polls: int = 0
    """Ray calls that brought its output back (a batch each, never one per request)."""
    sends: int = 0
    """Ray calls that carried its commands."""

    def where(self) -> str:
        return f"node {self.ip} ({self.node_id[:12]})"


class _Stdin:
    """The shard's command pipe: lines queued, sent in order by one task."""

    def __init__(self) -> None:
        self.queue: list[bytes] = []
        self.ready = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.queue.append(data)
        self.ready.set()


class RayShardProcess:
    """A shard on a Ray node, as the coordinator sees a child process."""

    def __init__(self, ray: Any, actor: Any, facts: RayShardFacts, on_end: Any) -> None:
        self._ray, self._actor, self.facts, self._on_end = ray, actor, facts, on_end
        self.stdin = _Stdin()
        self.stdout = asyncio.StreamReader(limit=READ_LIMIT)
        self.stderr = asyncio.StreamReader(limit=READ_LIMIT)
        self.pid = facts.pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()
        self._sha = hashlib.sha256()
        self._sender = asyncio.create_task(self._send())
        self._poller = asyncio.create_task(self._poll())

    async def _send(self) -> None:
        """Queued commands to the node, in order: one Ray call per batch of lines."""
        while not self._exited.is_set():
            await self.stdin.ready.wait()
            self.stdin.ready.clear()
            data, self.stdin.queue = b"".join(self.stdin.queue), []
            for at in range(0, len(data), SEND_CHUNK):  # in order: one call at a time
                self.facts.sends += 1
                try:
                    ref = self._actor.write.remote(data[at : at + SEND_CHUNK])
                    sent = bool(await _get(ref, LOST_AFTER_S))
                except Exception:  # a lost node: the poll names it
                    sent = False
                if not sent:  # a command missed (or late, out of order): never go on
                    self.kill()  # a shard that did not get its commands is lost, named
                    return

    async def _poll(self) -> None:
        """The node's batches of lines into the readers, until the shard exits (or its
        host is lost: then the readers end and the coordinator sees a lost shard)."""
        facts, ray = self.facts, self._ray
        try:
            while True:
                ref = self._actor.read.remote(POLL_WAIT_S)
                out, err, rc = await _get(ref, POLL_WAIT_S + LOST_AFTER_S)
                facts.polls += 1
                if out:
                    self._sha.update(out)
                    facts.received_lines += out.count(b"\n")
                    self.stdout.feed_data(out)
                if err:
                    self.stderr.feed_data(err)
                if rc is not None:
                    break
            await self._finish(rc)
        except (ray.exceptions.RayError, TimeoutError, OSError) as e:
            facts.lost_why = f"its host, {facts.where()}, was lost ({type(e).__name__})"
            self.stderr.feed_data(safe_line(f"ray: {facts.lost_why}: {e}"[:500]).encode() + b"\n")
            self.kill()
        finally:
            facts.received_sha256 = self._sha.hexdigest()
            print(  # into runner.log: what the control plane carried for this shard
                f"ray: shard on {facts.where()}: {facts.received_lines} lines in "
                f"{facts.polls} polls, {facts.sends} command calls",
                file=sys.stderr,
            )
            self.stdout.feed_eof()
            self.stderr.feed_eof()
            self._exited.set()
            self._sender.cancel()  # nothing more to send: it would wait for ever
            self._on_end()

    async def _finish(self, rc: int) -> None:
        """The node's journal digest and the end clock offset, then the actor's end."""
        facts = self.facts
        with contextlib.suppress(Exception):  # the figures stay None: said in the record
            got = await _get(self._actor.finish.remote(), LOST_AFTER_S)
            facts.journal_sha256, facts.journal_lines = got["sha256"], int(got["lines"])
            facts.end = await measure_clock(self._actor)
        self.returncode = rc
        with contextlib.suppress(Exception):
            self._ray.kill(self._actor)

    async def wait(self) -> int | None:
        """Its exit status; None when its host was lost (no status came back)."""
        await self._exited.wait()
        return self.returncode

    def kill(self) -> None:
        """End the shard now: the node kills its process (nothing if the node is gone)."""
        with contextlib.suppress(Exception):
            self._actor.kill.remote()


class RayShards:
    """The run's Ray session: the placement group, and one actor per shard; it is the
    sharded generator's launcher (``await shards(link, env)``)."""

    def __init__(self, ray: Any, address: str, count: int, pg: Any, run_name: str) -> None:
        self._ray, self.address, self.count = ray, address, count
        self._pg, self._run_name = pg, run_name
        self.facts: dict[int, RayShardFacts] = {}
        self._ended = 0

    async def __call__(self, link: ShardLink, env: Any) -> ShardProcess:
        """Start shard ``link.index`` on its bundle's node; its clock offset into the
        link. (``env`` is this host's: a node starts its shard with its own.)"""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from soak.run.ray_host import ShardHost

        strategy = PlacementGroupSchedulingStrategy(
            self._pg, placement_group_bundle_index=link.index
        )
        actor_cls = self._ray.remote(ShardHost)
        actor = actor_cls.options(
            scheduling_strategy=strategy,
            num_cpus=1,
            resources={SHARD_RESOURCE: 1},
            max_concurrency=4,  # read long-polls while write, clock and finish answer
            max_restarts=0,
        ).remote(link.index, self._run_name)
        where = await _get(actor.start.remote(), 60.0)  # a worker process to start there
        facts = self.facts[link.index] = RayShardFacts(
            node_id=str(where["node_id"]), ip=str(where["ip"]), pid=int(where["pid"]),
            journal=str(where["journal"]),
        )  # fmt: skip
        facts.start = await measure_clock(actor)
        link.clock_offset_ns = facts.start.offset_ns
        return RayShardProcess(self._ray, actor, facts, self._shard_ended)

    def _shard_ended(self) -> None:
        self._ended += 1
        if self._ended == self.count:  # every shard is over: the hosts are free again
            with contextlib.suppress(Exception):
                self._ray.util.remove_placement_group(self._pg)

    def annotate(self, infos: list[ShardInfo]) -> list[ShardInfo]:
        """The record's shards, with where each ran, its clock offsets and its journal."""
        out = []
        for info in infos:
            f = self.facts.get(info.index)
            if f is None:
                out.append(info)
                continue
            out.append(
                info.model_copy(
                    update={
                        "host": f.ip or info.host,
                        "node_id": f.node_id or None,
                        "clock_offset_ns": None if f.start is None else f.start.offset_ns,
                        "clock_uncertainty_ns": None if f.start is None else f.start.uncertainty_ns,
                        "clock_offset_end_ns": None if f.end is None else f.end.offset_ns,
                        "clock_uncertainty_end_ns": None if f.end is None else f.end.uncertainty_ns,
                        "journal_sha256": f.journal_sha256,
                        "journal_lines": f.journal_lines,
                        "journal_path": f.journal or None,
                        "received_sha256": f.received_sha256,
                        "received_lines": f.received_lines,
                        "lost_why": f.lost_why,
                    }
                )
            )
        return out


async def reserve(address: str, count: int, run_name: str) -> RayShards:
    """Connect to the cluster at ``address`` and reserve one node per shard; raises
    :class:`RayRefused` (in words) when it cannot."""
    ray = _ray(address)
    try:
        await _connect(ray, address)
    except Exception as e:
        why = (
            f"nothing answered within {CONNECT_TIMEOUT_S:.0f} s"
            if isinstance(e, TimeoutError)
            else f"{type(e).__name__}: {e}"
        )
        raise RayRefused(
            f"--ray {address}: cannot connect to a Ray cluster there ({why}); no load"
        ) from e
    from ray.util.placement_group import placement_group

    offering = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(SHARD_RESOURCE)]
    if len(offering) < count:  # no wait: it can never be placed
        raise RayRefused(_too_few(address, count, len(offering), "refused at once"))
    bundles = [{"CPU": 1, SHARD_RESOURCE: 1} for _ in range(count)]
    pg = placement_group(bundles, strategy="STRICT_SPREAD")
    try:
        await _get(pg.ready(), PLACE_TIMEOUT_S)
    except Exception as e:
        ray.util.remove_placement_group(pg)
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(SHARD_RESOURCE)]
        why = f"not placed within {PLACE_TIMEOUT_S:.0f} s: taken by other work"
        raise RayRefused(_too_few(address, count, len(nodes), why)) from e
    return RayShards(ray, address, count, pg, run_name)


async def _connect(ray: Any, address: str) -> None:
    """``ray.init`` off the loop, in a daemon thread: against an address where no
    cluster answers it retries for minutes, and a run must neither wait for it nor be
    kept from exiting by it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if not done.done():
            done.set_result(None) if error is None else done.set_exception(error)

    def init() -> None:
        error: BaseException | None = None
        try:
            ray.init(
                address=address,
                log_to_driver=False,  # the shards' logs come back on their own stderr
                logging_level="WARNING",
                configure_logging=False,
            )
        except BaseException as e:  # handed to the loop, whatever it is
            error = e
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=init, name="ray-connect", daemon=True).start()
    await asyncio.wait_for(done, CONNECT_TIMEOUT_S)


def _too_few(address: str, count: int, nodes: int, why: str) -> str:
    return (
        f"--ray {address} --shards {count}: the cluster has {nodes} node"
        f"{'' if nodes == 1 else 's'} offering {SHARD_RESOURCE}; a sharded run needs one "
        f"node per shard, each with a CPU free ({why}; a node offers it with "
        f"`ray start --resources '{{\"{SHARD_RESOURCE}\": 1}}'`)"
    )


class RayRefused(Exception):
    """The cluster cannot take this run's shards (words for the record)."""


async def ray_preflight(st: RunState) -> None:
    """Before any load: this run's hosts on Ray (``st.shard_launcher``), or a preflight
    error that ends the run with no load."""
    cfg = st.config
    if cfg.ray is None:
        return
    try:
        st.shard_launcher = await reserve(cfg.ray, cfg.shards, st.run_id)
    except RayRefused as e:
        st.preflight_errors.append(str(e))
    st.events.emit(
        "shard",
        f"Ray: {cfg.shards} hosts reserved at {cfg.ray}"
        if st.shard_launcher is not None
        else "Ray: the shards' hosts could not be reserved: no load",
        "info" if st.shard_launcher is not None else "error",
    )
