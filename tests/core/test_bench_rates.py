"""bench/shard_scaling.py's rates: what the client received and what the server wrote.

The scaling figure (2 shards over 1) is a ratio of the client's received tokens a second;
a bench that credited the server's writes would show a client that fell behind as keeping
up (the server writes into socket buffers whether the client reads them or not).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
shard_scaling = importlib.import_module("shard_scaling")  # a script's folder, not a package


def _lines(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _phase(t: float, phase: str) -> dict[str, object]:
    wall = f"2026-12-07T10:00:{t:06.3f}+00:00"
    return {"t": t, "wall": wall, "kind": "phase", "data": {"phase": phase}}


def _request(
    sent: float, ttft: float | None, itl_s: list[float], **kw: object
) -> dict[str, object]:
    chunks = len(itl_s) + 1 if ttft is not None else 0
    base = {"phase": "load", "sent_s": sent, "ttft_s": ttft, "chunks": chunks}
    return {**base, "output_tokens": chunks, "itl_us": [round(x * 1e6) for x in itl_s], **kw}


def test_received_rate_counts_each_token_when_the_client_read_it(tmp_path: Path) -> None:
    """Issue window 1 s → 9 s: the count runs over its last three quarters (3 s → 9 s)."""
    _lines(
        tmp_path / "events.jsonl",
        [_phase(0.5, "barrier"), _phase(1.0, "load"), _phase(9.0, "drain")],
    )
    _lines(
        tmp_path / "requests.jsonl",
        [
            _request(0.5, 0.5, [1.0] * 9),  # tokens at 1, 2, … 10 s: 3 … 8 inside, 6
            _request(4.0, 0.5, [0.5], chunks=2, output_tokens=4),  # 2 tokens a chunk: 4
            _request(4.0, None, [], ok=False),  # failed before a token: nothing
            _request(2.0, 0.1, [0.1] * 5, phase="warmup"),  # not the load's
            _request(8.5, 0.4, [0.2, 0.2]),  # 8.9 inside; 9.1 and 9.3 after the window
        ],
    )
    rate, start, end = shard_scaling.received_rate(tmp_path) or (0.0, 0.0, 0.0)
    assert rate == pytest.approx((6 + 4 + 1) / 6.0)
    origin = shard_scaling._wall("2026-12-07T10:00:01.000+00:00") - 1.0
    assert (start - origin, end - origin) == (pytest.approx(3.0), pytest.approx(9.0))


def test_received_rate_needs_an_issue_window(tmp_path: Path) -> None:
    _lines(tmp_path / "events.jsonl", [_phase(0.5, "barrier")])
    _lines(tmp_path / "requests.jsonl", [_request(0.5, 0.5, [1.0])])
    assert shard_scaling.received_rate(tmp_path) is None


def test_server_rate_interpolates_the_servers_count_between_polls() -> None:
    served = shard_scaling.ServerRate("http://127.0.0.1:9")  # nothing there: no samples
    served.stop()
    served.samples = [(100.0, 0), (101.0, 100), (102.0, 300)]
    assert served.rate(100.5, 101.5) == pytest.approx(150.0)
    assert served.rate(99.0, 101.0) is None  # before the first poll: not covered
    assert served.rate(101.0, 102.5) is None
