"""Sanity of every load response: the checks on crafted answers, the parser's bounded
collection (any split, template, fast and slow paths), the journal, live and summary
counts, and the simulated engine's ordinary output never flagged."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats
from loadgen.prompts import BodyBuilder
from loadgen.sanity import (
    COLLECT_MAX_BYTES,
    REPETITION_MIN_UNITS,
    REPETITION_SHARE_MAX,
    WHITESPACE_RUN_MAX,
    SanityFlag,
    TextFacts,
    _repetitive,
    check,
    repeated_share,
)
from loadgen.sse import SSEParser
from simengine import SimConfig, run_sim
from soak.record.journal import request_line
from soak.record.journal_lines import RequestLine
from soak.record.summary import LoadTiming, summarize_load
from tests.simengine.sim_helpers import FAST

PROSE = (
    "A short benchmark can tell us which configuration deserves more time. It cannot tell "
    "us what will happen after two hours, or whether the next structured request will still "
    "work. The scheduler keeps every running sequence in one batch, and the cache holds "
    "blocks for each prompt, so that a long soak shows how latency, throughput, memory and "
    "errors behave over hours on real hardware under steady load."
)
CODE = (
    "def handler(request):\n"
    "    if request.method == 'POST':\n"
    "        body = json.loads(request.body)\n"
    "        for item in body['items']:\n"
    "            if item.get('id') is None:\n"
    "                raise ValueError('missing id')\n"
    "            yield item\n"
    "    else:\n"
    "        return None\n"
)


def units_of(text: str) -> list[str]:
    """Token-ish pieces of ``text``, as a streaming server sends them (word + its space)."""
    out: list[str] = []
    word = ""
    for ch in text:
        if ch.isspace() and word.strip():
            out.append(word)
            word = ""
        word += ch
    return [*out, word] if word else out


def flags(values: list[str] | None, **kw: Any) -> tuple[str, ...]:
    given: dict[str, Any] = {"finish_reason": "stop", "output_tokens": 100, "max_tokens": 256}
    return check(None if values is None else TextFacts.of(values), **(given | kw))


# --- the checks --------------------------------------------------------------------------------


def test_ordinary_text_and_code_are_not_flagged() -> None:
    assert flags(units_of(PROSE)) == ()
    assert flags(units_of(PROSE * 3)) == (SanityFlag.REPETITION,)  # the same paragraph 3×
    assert flags(units_of(CODE)) == ()
    rng = random.Random(3)
    words = PROSE.split()
    assert flags([" " + rng.choice(words) for _ in range(2000)]) == ()
    assert flags(["Yes."]) == ()


def test_empty_visible_output() -> None:
    assert flags(None) == (SanityFlag.EMPTY_VISIBLE,)  # nothing, or reasoning only
    assert flags([" ", "\n", "\t"]) == (SanityFlag.EMPTY_VISIBLE,)
    tool_only = TextFacts.of([], tool_calls=True)
    assert check(tool_only, finish_reason="tool_calls", output_tokens=9, max_tokens=256) == ()


def test_250k_trailing_spaces_are_runaway_whitespace() -> None:
    values = units_of(PROSE) + [" " * 16] * (250_000 // 16)
    assert flags(values, finish_reason="length", output_tokens=256) == (
        SanityFlag.RUNAWAY_WHITESPACE,
        SanityFlag.REPETITION,  # the same 16 spaces, again and again
    )
    one_run = [*units_of(PROSE), " " * WHITESPACE_RUN_MAX, "end."]
    assert flags(one_run) == (SanityFlag.RUNAWAY_WHITESPACE,)
    rng = random.Random(4)
    long_text = [" " + rng.choice(PROSE.split()) for _ in range(1000)]
    assert flags([*long_text, " " * (WHITESPACE_RUN_MAX - 1), "end."]) == ()


def test_whitespace_share_on_long_answers_only() -> None:
    sparse = [f"{i}\n\n\n\n\n" for i in range(100)]  # ~75 % newlines, no long run
    assert flags(sparse) == (SanityFlag.RUNAWAY_WHITESPACE,)
    assert flags(["a", "\n\n\n\n\n\n\n\n", "b"]) == ()  # too short to judge a share


def test_repetition_needs_a_loop_and_a_minimum_length() -> None:
    loop = units_of(PROSE) + units_of("the cat sat on the mat. ") * 40
    assert flags(loop) == (SanityFlag.REPETITION,)
    assert flags([" again"] * (REPETITION_MIN_UNITS - 1)) == ()  # short answers: never
    assert flags([" again"] * REPETITION_MIN_UNITS) == (SanityFlag.REPETITION,)
    assert repeated_share(["a", "b", "c", "d"] * 2) == pytest.approx(1 / 5)  # abcd again
    assert repeated_share(["a"]) == 0.0


def test_unrequested_finish_reasons() -> None:
    prose = units_of(PROSE)
    assert flags(prose, finish_reason="abort") == (SanityFlag.UNREQUESTED_FINISH,)
    assert flags(prose, finish_reason="error") == (SanityFlag.UNREQUESTED_FINISH,)
    tiny = {"finish_reason": "length", "output_tokens": 10, "max_tokens": 256}
    assert flags(prose, **tiny) == (SanityFlag.UNREQUESTED_FINISH,)
    assert flags(prose, **tiny, ignore_eos=True) == ()
    assert flags(prose, **(tiny | {"output_tokens": 256})) == ()  # the request's own limit
    assert flags(prose, **(tiny | {"max_tokens": None})) == ()  # limit unknown: not judged
    assert flags(prose, finish_reason="stop", output_tokens=1) == ()


# --- the parser collects what the checks need -------------------------------------------------


def _chat(value: str, *, compact: bool = True, ascii_only: bool = False) -> bytes:
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": value}, "finish_reason": None}],
    }
    seps = (",", ":") if compact else (", ", ": ")
    return b"data: " + json.dumps(obj, separators=seps, ensure_ascii=ascii_only).encode() + b"\n\n"


TRICKY = ["Hello", " wor", "ld", ' "quoted"', "\n", "é", "\\", ' end\\"', "😀", "tab\tx", "\u3000"]


def _collected(parser: SSEParser) -> tuple[list[str], str]:
    assert parser.text is not None
    facts = parser.text.facts()
    return [orjson.loads(b'"' + u + b'"') for u in facts.units], "".join(TRICKY)


@pytest.mark.parametrize("ascii_only", [False, True])  # raw UTF-8, or \\uXXXX escapes
@pytest.mark.parametrize("compact", [True, False])  # template/fast paths, or the slow path
def test_parser_collects_every_value_whole_under_any_split(compact: bool, ascii_only: bool) -> None:
    body = b"".join(_chat(v, compact=compact, ascii_only=ascii_only) for v in TRICKY)
    body += b"data: [DONE]\n\n"
    for size in (len(body), 1, 7, 64):
        p = SSEParser(collect=True)
        for i in range(0, len(body), size):
            p.feed(body[i : i + size])
        assert p.done
        units, _ = _collected(p)
        assert units == TRICKY, size
        assert p.text is not None
        facts = p.text.facts()
        assert facts.chars == len("".join(TRICKY))


def test_paced_template_reads_are_collected() -> None:
    p = SSEParser(collect=True)
    for v in ["Hi", " there", " friend", "\\n"]:  # one event per read: the paced path
        p.feed(_chat(v.replace("\\n", "\n")))
    assert p.text is not None
    assert [orjson.loads(b'"' + u + b'"') for u in p.text.facts().units] == [
        "Hi",
        " there",
        " friend",
        "\n",
    ]


def test_reasoning_is_not_visible_and_tool_calls_are() -> None:
    reasoning = b'data: {"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}\n\n'
    p = SSEParser(collect=True)
    p.feed(reasoning * 3 + b"data: [DONE]\n\n")
    assert not p.content_seen
    assert p.text is not None and p.text.facts().units == []
    tool = (
        b'data: {"choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,'
        b'"function":{"name":"f","arguments":"{}"}}]}}]}\n\n'
    )
    p = SSEParser(collect=True)
    p.feed(tool + b"data: [DONE]\n\n")
    assert p.content_seen and p.text is not None
    assert check(p.text.facts(), finish_reason="tool_calls", output_tokens=5, max_tokens=9) == ()


def test_no_collection_unless_asked() -> None:
    p = SSEParser()
    p.feed(_chat("Hello") + _chat(" you"))
    assert p.text is None


def test_memory_is_capped_and_the_tail_is_what_is_judged() -> None:
    p = SSEParser(collect=True)
    p.feed(_chat("Start."))
    held = 0
    for i in range(250_000 // 16):  # vLLM #48089: a quarter million trailing spaces
        p.feed(_chat(" " * 16))
        assert p.text is not None
        held = max(held, len(p.text.raw))
        if i == 10:
            p.feed(_chat(" "))  # a different unit between
    assert held <= COLLECT_MAX_BYTES + 17
    assert p.text is not None
    facts = p.text.facts()
    assert facts.chars == len("Start.") + 250_000 // 16 * 16 + 1
    assert facts.longest_space_run == facts.chars - len("Start.")
    assert len(facts.units) * 17 <= COLLECT_MAX_BYTES
    got = check(facts, finish_reason="length", output_tokens=15_626, max_tokens=15_626)
    assert SanityFlag.RUNAWAY_WHITESPACE in got


def test_a_loop_late_in_a_long_answer_is_seen() -> None:
    rng = random.Random(5)
    words = [f" w{i}" for i in range(500)]
    p = SSEParser(collect=True)
    for _ in range(30_000):  # ~5 bytes a value: ~150 KiB of varied text, spilled twice
        p.feed(_chat(rng.choice(words)))
    for _ in range(600):
        for w in (" and", " then", " again"):
            p.feed(_chat(w))
    assert p.text is not None
    facts = p.text.facts()
    assert facts.chars > 2 * COLLECT_MAX_BYTES
    got = check(facts, finish_reason="length", output_tokens=31_800, max_tokens=31_800)
    assert got == ()  # the loop is most of 1800 units, but not of the last 32-64 KiB
    for _ in range(4000):
        for w in (" and", " then", " again"):
            p.feed(_chat(w))
    assert SanityFlag.REPETITION in check(
        p.text.facts(), finish_reason="length", output_tokens=43_800, max_tokens=43_800
    )


# --- journal, live and summary ----------------------------------------------------------------


def _result(n: int, flagged: tuple[str, ...] = ()) -> RequestResult:
    r = RequestResult(request_id=f"r{n}", worker=0, prompt_id=n, sent_ns=10**9)
    r.first_byte_ns, r.first_token_ns, r.end_ns = 11 * 10**8, 12 * 10**8, 2 * 10**9
    r.status, r.output_tokens, r.prompt_tokens, r.chunks = 200, 3, 5, 3
    r.sanity = flagged
    return r


def test_the_journal_line_says_sanity_only_when_flagged() -> None:
    plain = orjson.loads(request_line(_result(1), 0))
    assert "sanity" not in plain
    flagged = orjson.loads(request_line(_result(2, ("repetition", "empty_visible")), 0))
    assert flagged["sanity"] == ["repetition", "empty_visible"]
    for raw in (plain, flagged):
        assert RequestLine.model_validate(raw).model_dump(mode="json") == raw


def test_live_slots_and_the_summary_count_flags(tmp_path: Path) -> None:
    live = LiveLoadStats(window_s=5)
    results = [_result(i) for i in range(6)]
    results[1].sanity = ("repetition",)
    results[4].sanity = ("repetition", "runaway_whitespace")
    for i, r in enumerate(results):
        live.record(r, now_s=1.0 + i * 0.5)
    window = live.window(now_s=6.0, load_start_s=0.0)
    whole = live.cumulative(6.0)
    for view in (window, whole):
        assert view.sanity_flagged == 2
        assert view.sanity_by_flag == {"repetition": 2, "runaway_whitespace": 1}
        assert view.completed == 6
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(request_line(r, 0) + b"\n" for r in results))
    timing = LoadTiming(requested_concurrency=1, workers_started=1, barrier_released=True)
    unchecked = summarize_load(path, timing)  # a --no-sanity run, or an older record
    assert (unchecked.sanity_checked, unchecked.sanity_flagged) == (False, 0)
    assert not {"sanity_checked", "sanity_flagged"} & set(unchecked.model_dump())
    timing.sanity_checked = True
    summary = summarize_load(path, timing)
    assert (summary.sanity_checked, summary.sanity_flagged) == (True, 2)
    assert summary.sanity_by_flag == {"repetition": 2, "runaway_whitespace": 1}
    assert summary.model_dump()["sanity_flagged"] == 2
    assert LoadTiming.from_summary(summary).sanity_checked


# --- the simulated engine ---------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_the_simulated_engines_ordinary_output_is_not_flagged(
    tmp_path: Path, api: str
) -> None:
    config: dict[str, Any] = {"replicas": 1, "log_dir": tmp_path, **FAST}
    async with run_sim(SimConfig(**config)) as sim:
        bodies = BodyBuilder(model="tiny-sim", api=api, max_tokens=256)  # type: ignore[arg-type]
        url = sim.replicas[0].url + bodies.path
        async with StreamClient(max_connections=40) as client:
            results = await asyncio.gather(
                *(
                    client.stream_into(
                        RequestResult(f"sane/{n}", 0, n, sent_ns=0, max_tokens=256),
                        url,
                        bodies.build(f"Tell me about soak test number {n}."),
                    )
                    for n in range(40)
                )
            )
    assert all(r.ok for r in results), [r.failure_detail for r in results if not r.ok]
    assert sum(r.chunks for r in results) > 40 * 20
    assert [r.sanity for r in results if r.sanity] == []


def test_whitespace_until_the_limit_is_runaway_even_when_short() -> None:
    lead = units_of("The answer is")
    padded = [*lead, *(["  ", "\n"] * 40)]  # 120 trailing characters, under the share's 200
    assert flags(padded, finish_reason="length", output_tokens=83, max_tokens=83) == (
        SanityFlag.RUNAWAY_WHITESPACE,
        SanityFlag.REPETITION,
    )
    assert flags([*units_of(CODE), "\n" * 3]) == ()  # an answer ends in a newline or two


@pytest.mark.parametrize("alphabet", [2, 5, 20, 80, 400])
def test_the_unit_shortcut_never_changes_the_answer(alphabet: int) -> None:
    rng = random.Random(alphabet)
    for _ in range(200):
        n = rng.randint(REPETITION_MIN_UNITS, 400)
        units = [rng.randrange(alphabet) for _ in range(n)]
        if rng.random() < 0.3:  # a loop from somewhere on
            at, period = rng.randrange(n), rng.randint(1, 6)
            units[at:] = [units[at + i % period] if at + period < n else 0 for i in range(n - at)]
        assert _repetitive(units) == (repeated_share(units) > REPETITION_SHARE_MAX)
