"""A conversation load's per-turn figures and session counts, from a journal written by
the journal's own writer (``request_line``), as a run writes it."""

from __future__ import annotations

from pathlib import Path

import orjson

from loadgen.envelope import FailureClass, RequestResult
from soak.record.journal import request_line
from soak.record.journal_lines import RequestLine
from soak.record.summary import LoadTiming, summarize_load
from soak.record.turn_figures import conversation_fields, turn_figures

MS = 1_000_000


def _result(n: int, session: int, turn: int, ok: bool = True, **kw: object) -> RequestResult:
    sent = (100 + n) * MS
    r = RequestResult(
        request_id=f"t/load/chat/{n}", worker=0, prompt_id=n, sent_ns=sent,
        session=session, turn=turn,
    )  # fmt: skip
    r.status = 200 if ok else 500
    if ok:
        r.first_byte_ns = r.first_token_ns = r.first_content_ns = sent + 10 * turn * MS
        r.end_ns = sent + 50 * turn * MS
        r.prompt_tokens, r.output_tokens, r.chunks = 100 * turn, 8, 8
        r.itl_ns = [MS] * 7
        r.finish_reason = "stop"
    else:
        r.failure, r.failure_detail = FailureClass.HTTP_5XX, "HTTP 500: boom"
    for key, value in kw.items():
        setattr(r, key, value)
    return r


def _journal(tmp_path: Path, results: list[tuple[RequestResult, str]]) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(request_line(r, 0, phase) + b"\n" for r, phase in results))
    return path


def _timing(issued: int) -> LoadTiming:
    return LoadTiming(
        requested_concurrency=2, workers_started=2, barrier_released=True,
        issue_start_s=0.0, issue_end_s=10.0, drain_end_s=11.0, issued=issued, backoffs=3,
        worker_errors={"BoomError": 1},
    )  # fmt: skip


def _load(tmp_path: Path) -> tuple[Path, int]:
    rows = [
        (_result(0, 0, 1), "warmup"),  # session 0 began in the warm-up
        (_result(1, 0, 2), "load"),
        (_result(2, 1, 1), "load"),
        (_result(3, 1, 2, answer_truncated=True), "load"),
        (_result(4, 1, 3), "load"),  # session 1: completed
        (_result(5, 2, 1), "load"),
        (_result(6, 2, 2, ok=False), "load"),  # session 2: ended at turn 2
        (_result(7, 3, 1, ok=False), "load"),  # session 3: ended at turn 1
        (_result(8, 4, 1), "load"),  # session 4: the window ended after turn 1
    ]
    return _journal(tmp_path, rows), len(rows) - 1


def test_turn_figures_sum_to_the_load_and_grow_with_the_turn(tmp_path):
    path, issued = _load(tmp_path)
    load = summarize_load(path, _timing(issued), "nearest-rank")
    turns, sessions = turn_figures(path, load, "nearest-rank", 3, 0.5)
    assert [t.index for t in turns] == [1, 2, 3]
    assert [t.load.issued for t in turns] == [4, 3, 1]
    assert sum(t.load.issued for t in turns) == load.issued == 8
    assert sum(t.load.completed for t in turns) == load.completed
    assert sum(t.load.failed for t in turns) == load.failed == 2
    assert sum(t.load.output_tokens for t in turns) == load.output_tokens
    assert [t.load.input_tokens_mean for t in turns] == [100.0, 200.0, 300.0]
    assert [t.load.ttft_s.p50 for t in turns] == [0.01, 0.02, 0.03]
    # What belongs to the whole load is not any one turn's.
    assert all(t.load.backoffs == 0 and not t.load.worker_errors for t in turns)
    assert load.backoffs == 3
    assert [t.sessions_ended for t in turns] == [1, 1, 0]
    assert [t.history_truncated for t in turns] == [0, 1, 0]
    assert sessions.started == 4  # session 0 began in the warm-up: not counted
    assert (sessions.completed, sessions.ended_early, sessions.unfinished) == (1, 2, 1)
    assert sessions.ended_early_by_turn == {"1": 1, "2": 1}
    assert sessions.history_truncated == 1 and sessions.think_time_s == 0.5


def test_the_record_fields_only_for_a_conversation_load(tmp_path):
    path, issued = _load(tmp_path)
    load = summarize_load(path, _timing(issued), "nearest-rank")
    assert conversation_fields(path, {"turns": 1}, load, "nearest-rank") == {}
    assert conversation_fields(path, {}, load, "nearest-rank") == {}  # an older config
    assert conversation_fields(path, {"turns": 3}, None, "nearest-rank") == {}
    fields = conversation_fields(path, {"turns": 3, "think_time_s": None}, load, "nearest-rank")
    assert set(fields) == {"turns", "sessions"} and fields["sessions"].think_time_s == 0.0


def test_turn_keys_are_written_only_for_a_conversation_and_match_the_line_model():
    plain = _result(0, 0, 1)
    plain.session = plain.turn = None
    single = request_line(plain, 0)
    assert not {"session", "turn", "answer_truncated"} & set(orjson.loads(single))
    line = orjson.loads(request_line(_result(1, 7, 2, answer_truncated=True), 0))
    assert (line["session"], line["turn"], line["answer_truncated"]) == (7, 2, True)
    assert "answer_truncated" not in orjson.loads(request_line(_result(2, 7, 3), 0))
    RequestLine.model_validate(line)  # the published line model declares them
