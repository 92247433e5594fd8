"""Property tests of the telemetry parsers: any text a server sends as ``/metrics`` (an
engine's or a DCGM exporter's), garbage or a real exposition mutated, never makes a
scrape raise. The parsers' contract: a sample, or ``ValueError`` (text the Prometheus
parser rejects) that the scrape turns into a sample with ``error`` set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.dcgm import parse_dcgm, scrape_dcgm
from probes.engine_metrics import parse_metrics, scrape

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL = {p.name: p.read_text() for p in sorted(FIXTURES.glob("*_metrics.txt"))}
DCGM_REAL = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="h"} 41\n'
    "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
    'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-1",Hostname="h",err_msg="x"} 13\n'
)
PROPS = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Pieces of the exposition grammar, so mutations land near what the parser looks at.
_TOKENS = st.sampled_from(
    [
        *'{ } " = , # NaN +Inf -Inf 1e999 _bucket _total le=" \\ counter histogram gauge'.split(),
        " ",
        "\n",
        "# TYPE ",
        "# HELP ",
        "\x00",
        "\x1b[2J",
        "\ufffd",
        "9" * 40,
    ]
)


@st.composite
def mutated(draw: st.DrawFn, texts: list[str]) -> str:
    """A real exposition with a few slices replaced, deleted or duplicated."""
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, min(len(text), i + 40)))
        op = draw(st.sampled_from(["replace", "delete", "dup", "truncate"]))
        if op == "replace":
            text = text[:i] + draw(_TOKENS | st.text(max_size=8)) + text[j:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "dup":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i]
    return text


garbage = st.text(max_size=300) | st.lists(_TOKENS, max_size=40).map("".join)
engine_text = garbage | mutated(list(REAL.values()))
dcgm_text = garbage | mutated([DCGM_REAL, *REAL.values()])


@PROPS
@given(text=engine_text)
def test_engine_metrics_parser_returns_a_sample_or_value_error(text: str) -> None:
    try:
        sample = parse_metrics(text, 1.0)
    except ValueError:
        return  # the contract: the scrape turns it into an "unparsable" sample
    assert sample.t == 1.0 and isinstance(sample.values, dict)


@PROPS
@given(text=dcgm_text)
def test_dcgm_parser_returns_readings_or_value_error(text: str) -> None:
    try:
        readings = parse_dcgm(text)
    except ValueError:
        return
    assert isinstance(readings, list)


def _client(body: bytes) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _req: httpx.Response(200, content=body))
    )


async def _scrape_both(body: bytes) -> None:
    async with _client(body) as client:
        sample = await scrape(client, "http://engine", 0)
        assert sample.error is not None or isinstance(sample.values, dict)
        dcgm = await scrape_dcgm(client, "http://gpu-node:9400", 0)
        assert dcgm.error is not None or dcgm.readings


@PROPS
@given(body=st.binary(max_size=200) | engine_text.map(lambda s: s.encode("utf-8", "replace")))
def test_a_scrape_of_any_bytes_never_raises(body: bytes) -> None:
    asyncio.run(_scrape_both(body))


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_real_fixtures_still_parse(name: str) -> None:
    sample = parse_metrics(REAL[name])
    assert sample.engine is not None and any(v is not None for v in sample.values.values())
