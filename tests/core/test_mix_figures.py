"""A mixed load's per-class figures from the journal: they sum to the load's, a class's
contract failures stay in that class, and ``class.<name>.*`` thresholds are judged on
them (and only on them)."""

from __future__ import annotations

from pathlib import Path

from loadgen.envelope import FailureClass, RequestResult
from soak.judge.facts import RunFacts
from soak.judge.thresholds import parse_thresholds
from soak.judge.verdict import judge
from soak.record.class_figures import class_figures, class_lines, mix_classes
from soak.record.journal import request_line
from soak.record.summary import LoadTiming, summarize_load

MS = 1_000_000
CLASSES = [("chat", 6.0), ("long", 2.0), ("json", 2.0)]


def _result(i: int, cls: str, *, failure: FailureClass | None = None) -> RequestResult:
    sent = i * 10 * MS
    ttft = {"chat": 50, "long": 400, "json": 60}[cls] * MS
    r = RequestResult(
        f"run/load/chat/{i}",
        worker=i % 4,
        prompt_id=i,
        sent_ns=sent,
        first_byte_ns=sent + 5 * MS,
        first_token_ns=sent + ttft,
        first_content_ns=sent + ttft,
        end_ns=sent + ttft + 100 * MS,
        status=200,
        prompt_tokens={"chat": 20, "long": 2000, "json": 40}[cls],
        output_tokens=8,
        chunks=8,
        finish_reason="stop",
        itl_ns=[10 * MS] * 7,
        workload_class=cls,
    )
    if failure is not None:
        r.failure, r.failure_detail = failure, "schema violation at /: 'priority' is required"
    return r


def _journal(tmp_path: Path) -> Path:
    order = ["chat", "chat", "long", "chat", "json", "chat", "json", "long", "chat", "chat"] * 3
    results = [_result(i, cls) for i, cls in enumerate(order)]
    results[4].failure = FailureClass.CONTRACT  # two of the json class's answers broke
    results[6].failure = FailureClass.CONTRACT
    results[7].cancelled = True  # a long one cut at the drain deadline
    results[9].failure = FailureClass.HTTP_5XX  # and one chat request failed to deliver
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(request_line(r, 0) + b"\n" for r in results))
    return path


TIMING = LoadTiming(
    requested_concurrency=4,
    workers_started=4,
    barrier_released=True,
    issue_start_s=0.0,
    issue_end_s=0.3,
    drain_end_s=0.8,
    issued=30,
    sanity_checked=True,
    backoffs=3,
)


def test_the_classes_figures_sum_to_the_load_s(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    load = summarize_load(path, TIMING)
    classes = class_figures(path, TIMING, CLASSES)
    assert [c.name for c in classes] == ["chat", "long", "json"]
    for key in ("issued", "completed", "failed", "cancelled", "prompt_tokens", "output_tokens"):
        assert sum(getattr(c.load, key) for c in classes) == getattr(load, key), key
    assert load.failures_by_class == {"contract_error": 2, "http_5xx": 1}
    by_class = {c.name: c.load for c in classes}
    assert by_class["json"].failures_by_class == {"contract_error": 2}
    assert by_class["chat"].failures_by_class == {"http_5xx": 1}
    assert by_class["long"].cancelled == 1 and by_class["long"].failed == 0
    assert by_class["long"].ttft_s.p50 == 0.4 and by_class["chat"].ttft_s.p50 == 0.05
    assert by_class["json"].backoffs == 0 and load.backoffs == 3  # the load's alone


def test_class_thresholds_are_judged_on_the_class_s_figures(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    names = [n for n, _ in CLASSES]
    exprs = [
        "class.json.error_rate==0",
        "class.long.error_rate==0",
        "class.long.ttft.p99<300ms",
        "class.chat.ttft.p99<300ms",
        "ttft.p99<1s",
    ]
    facts = RunFacts(
        load=summarize_load(path, TIMING),
        classes=class_figures(path, TIMING, CLASSES),
        thresholds=parse_thresholds(exprs, classes=names),
        max_failures=10,
    )
    states = {s.condition: (s.state, s.observed) for s in judge(facts).thresholds}
    assert states["class.json.error_rate==0"] == ("breached", 2 / 6)
    assert states["class.long.error_rate==0"] == ("ok", 0.0)
    assert states["class.long.ttft.p99<300ms"][0] == "breached"
    assert states["class.chat.ttft.p99<300ms"][0] == "ok"
    assert states["ttft.p99<1s"][0] == "ok"
    words = [r.message for r in judge(facts).reasons if r.code == "threshold"]
    assert any("class.json.error_rate==0 breached: 33.3 %" in w for w in words), words


def test_no_class_figures_no_class_data(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    facts = RunFacts(
        load=summarize_load(path, TIMING),
        thresholds=parse_thresholds(["class.json.error_rate==0"]),
    )
    (state,) = judge(facts).thresholds
    assert state.state == "no_data"
    reasons = [r.message for r in judge(facts).reasons if r.code == "threshold_no_data"]
    assert reasons and "class 'json': no load request completed or failed" in reasons[0]


def test_the_classes_come_from_the_config_and_print_one_line_each(tmp_path: Path) -> None:
    config = {
        "mix": {
            "file": "m.toml",
            "classes": [{"name": "a", "weight": 3}, {"name": "b", "weight": 1}],
        }
    }
    assert mix_classes(config) == [("a", 3.0), ("b", 1.0)]
    assert mix_classes({"mix": None}) == [] and mix_classes({}) == []
    path = _journal(tmp_path)
    lines = class_lines(class_figures(path, TIMING, CLASSES), " (invalid)")
    assert len(lines) == 4 and lines[0].split()[:3] == ["class", "share", "done"]
    json_line = lines[3]
    assert json_line.split()[:4] == ["json", "20%", "4", "2"], json_line
    assert "(invalid)" in json_line and json_line.endswith("2 contract_error")
    assert class_lines([]) == []
