"""Fixtures for the simengine tests: a client session and an in-process simulator."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from simengine import SimConfig, run_sim
from simengine.server import Sim
from tests.simengine.sim_helpers import FAST


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp client with bounded timeouts (every test ends by itself)."""
    timeout = aiohttp.ClientTimeout(total=60, sock_read=30)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as s:
        yield s


@pytest.fixture
def sim_factory(
    tmp_path: Path,
) -> Callable[..., contextlib.AbstractAsyncContextManager[Sim]]:
    """``async with sim_factory(replicas=1, ...) as sim`` with fast test speeds."""

    def make(**overrides: Any) -> contextlib.AbstractAsyncContextManager[Sim]:
        values: dict[str, Any] = {"replicas": 1, "log_dir": tmp_path, **FAST, **overrides}
        return run_sim(SimConfig(**values))

    return make


@pytest.fixture
async def sim(sim_factory: Callable[..., Any]) -> AsyncIterator[Sim]:
    """One fast replica with default settings."""
    async with sim_factory() as s:
        yield s
