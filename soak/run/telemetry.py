"""The run's telemetry watchers: which ones a config asks for, started and stopped.

Started after the preflight (a run that never reached its endpoints watches nothing but the
host), each on the journals and the load window it is given; stopped in ``finally`` by
:func:`stop_watchers`, whose failures are soaktop failures of the run, never a lost record.
"""

from __future__ import annotations

import shlex
import traceback
from collections.abc import Awaitable, Callable

from soak.run.state import RunParts
from soak.watch.engine import EngineWatch
from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.gpu.nvml import NvmlWatch
from soak.watch.health import FaultWatch
from soak.watch.parse_worker import off_loop_parser


async def start_watchers(parts: RunParts, headers: dict[str, str]) -> None:
    """Start the engine, fault and GPU watchers the config asks for (into ``parts``)."""
    st, cfg, w = parts.state, parts.state.config, parts.watchers
    telemetry, scrub, interval = parts.journals.telemetry, st.redactor, cfg.telemetry_interval_s
    w.engines = EngineWatch(
        cfg.endpoints,
        headers,
        st.origin_ns,
        telemetry,
        interval,
        scrub=scrub.obj,
        events=st.events,
        window=parts.window,
        parser=off_loop_parser(),  # /metrics is parsed off the loop
    )
    w.engines.start()
    w.faults = FaultWatch(
        cfg.endpoints,
        headers,
        st.events,
        st.now_s,
        interval,
        log_files=list(cfg.server_log),
        log_commands=[shlex.split(c) for c in cfg.server_log_cmd],
        keep_lines=not cfg.redact,
        scrub=scrub.text,
        window=parts.window,
    )
    await w.faults.start()
    if cfg.nvml:
        w.gpu_sources.append(
            NvmlWatch(
                st.origin_ns,
                telemetry,
                st.events,
                interval,
                scrub.obj,
                ignore_xid=cfg.ignore_xid,
                when=st.when,
                window=parts.window,
            )
        )
    if cfg.dcgm:
        w.gpu_sources.append(
            DcgmWatch(
                cfg.dcgm,
                st.origin_ns,
                telemetry,
                st.events,
                interval,
                scrub=scrub.obj,
                ignore_xid=cfg.ignore_xid,
                when=st.when,
                window=parts.window,
                parser=off_loop_parser("DCGM parser"),
            )
        )
    for source in w.gpu_sources:
        source.start()


async def stop_watchers(parts: RunParts) -> None:
    """Stop every watcher and the gates; their loop errors join the run's."""
    st, w = parts.state, parts.watchers
    for name, closer in (
        ("engine watch", w.engines.stop if w.engines else None),
        ("fault watch", w.faults.stop if w.faults else None),
        *((f"GPU source {i}", src.stop) for i, src in enumerate(w.gpu_sources)),
        ("gates", parts.gates.aclose if parts.gates else None),
    ):
        if closer is not None:
            await _close_quietly(parts, name, closer)
    for watcher in w.polled():
        st.internal_errors += watcher.loop_errors


async def _close_quietly(parts: RunParts, name: str, closer: Callable[[], Awaitable[None]]) -> None:
    """Stop one part; a failure to stop is recorded, and never costs the record."""
    try:
        await closer()
    except Exception as e:
        traceback.print_exc()
        parts.state.internal_errors.append(f"stopping the {name}: {type(e).__name__}: {e}"[:300])
