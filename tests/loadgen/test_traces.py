"""Trace files (issue 16 §1 "Trace replay"): every shipped sample parses, bad lines are
refused in words, and the synthesised prompts keep the trace's counts and shared blocks."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.prompts import BodyBuilder
from loadgen.trace_source import TraceSource, calibrate, on_target
from loadgen.traces import SKIP_NO_OUTPUT, TraceError, load_trace
from simengine.tokenizer import count_text, render_chat

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "traces"


async def _bare(text: str) -> int:
    return count_text(text)


async def _chat(text: str) -> int:
    return render_chat([{"role": "user", "content": text}])[1]


async def _source(path: Path) -> TraceSource:
    pool = await calibrate(
        load_trace(path), time_scale=1.0, seed=3, count_text=_bare, count_prompt=_chat
    )
    return TraceSource(pool, BodyBuilder(model="m", ignore_eos=True))


def _prompt(source: TraceSource, n: int) -> tuple[str, int]:
    body = orjson.loads(source.request(n).body)
    return body["messages"][0]["content"], body["max_tokens"]


@pytest.mark.parametrize(
    ("name", "fmt", "arrivals", "skipped"),
    [
        ("mooncake_sample.jsonl", "mooncake", 30, 0),
        ("azure_sample.csv", "azure", 30, 0),
        ("burstgpt_sample.csv", "burstgpt", 29, 1),  # one failed request: 0 response tokens
        ("soaktop_sample.jsonl", "soaktop", 30, 0),
    ],
)
def test_each_sample_parses_from_zero_in_time_order(name, fmt, arrivals, skipped):
    trace = load_trace(SAMPLES / name)
    assert (trace.format, len(trace.arrivals)) == (fmt, arrivals)
    assert sum(trace.skipped.values()) == skipped
    offsets = [a.offset_s for a in trace.arrivals]
    assert offsets[0] == 0.0 and offsets == sorted(offsets) and trace.reordered == 0
    assert all(a.input_tokens >= 1 and a.output_tokens >= 1 for a in trace.arrivals)


def test_the_formats_own_units_become_seconds(tmp_path):
    moon = tmp_path / "m.jsonl"
    moon.write_text(
        '{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]}\n'
        '{"timestamp": 3500, "input_length": 100, "output_length": 2, "hash_ids": [7]}\n'
    )
    azure = tmp_path / "a.txt"  # the header decides, not the extension
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
    )
    m, a = load_trace(moon), load_trace(azure)
    assert [x.offset_s for x in m.arrivals] == [0.0, 2.5] and m.arrivals[0].blocks == (7, 8)
    assert a.format == "azure" and a.arrivals[1].offset_s == pytest.approx(4.314579)


def test_an_unsorted_trace_is_sorted_and_says_how_many_lines_were_out_of_order(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [(2.0, 10), (0.5, 11), (1.0, 12), (3.0, 13)]
    path.write_text(
        "".join(f'{{"t_s": {t}, "input_tokens": {i}, "output_tokens": 4}}\n' for t, i in lines)
    )
    trace = load_trace(path)
    assert [a.input_tokens for a in trace.arrivals] == [11, 12, 10, 13]
    assert [a.offset_s for a in trace.arrivals] == [0.0, 0.5, 1.5, 2.5]
    assert trace.reordered == 2 and [a.line for a in trace.arrivals] == [2, 3, 1, 4]


GOOD = '{"t_s": 0, "input_tokens": 10, "output_tokens": 4}\n'
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _soak(**fields: object) -> str:
    return GOOD + orjson.dumps(fields).decode() + "\n"


def _prefixed(*lines: tuple[int, int]) -> str:
    return "".join(
        f'{{"t_s": 0, "input_tokens": {i}, "output_tokens": 2, "prefix": "a", '
        f'"prefix_tokens": {p}}}\n'
        for i, p in lines
    )


def _moon(inp: int, ids: object) -> str:
    return orjson.dumps(
        {"timestamp": 0, "input_length": inp, "output_length": 2, "hash_ids": ids}
    ).decode()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is empty"),
        ("hello,world\n1,2\n", "header 'hello,world' is not a known trace; allowed: Azure"),
        ('{"foo": 1}\n', "line 1: a JSON line with foo; allowed: Mooncake"),
        (GOOD + "{not json\n", "line 2: not JSON"),
        (_soak(t_s=-1, input_tokens=10, output_tokens=4), "line 2: t_s = -1; allowed: seconds"),
        (
            _soak(t_s=1, input_tokens=2.5, output_tokens=4),
            "line 2: input_tokens = 2.5; allowed: a whole number from 1",
        ),
        (
            _soak(t_s=1, input_tokens=9, output_tokens=0),
            "line 2: output_tokens = 0; allowed: a whole number from 1",
        ),
        (
            _soak(t_s=1, input_tokens=9),
            "line 2: output_tokens is missing; every line has t_s, input_tokens, output_tokens",
        ),
        (
            _soak(t_s=1, input_tokens=9, output_tokens=2, seed=3),
            "line 2: seed = 3; allowed: only input_tokens",
        ),
        (
            _prefixed((90, 20), (90, 30)),
            "line 2: prefix_tokens = 30; allowed: 20, as line 1 gave prefix 'a': one prefix",
        ),
        (_prefixed((9, 20)), "line 1: prefix_tokens = 20; allowed: at most input_tokens (9)"),
        (_moon(600, [1, 2, 3]), "line 1: hash_ids = '3 ids'; allowed: at most 2: one per 512"),
        (_moon(60, "x"), "line 1: hash_ids = 'x'; allowed: a list of whole numbers"),
        (AZURE + "yesterday,3,4\n", "line 2: TIMESTAMP = 'yesterday'; allowed: a date and time"),
        (
            AZURE + "2023-11-16 18:15:46,3\n",
            "line 2: the row = '2023-11-16 18:15:46,3'; allowed: 3 columns",
        ),
        (
            BURST + "5,GPT-4,x,3,3,API log\n",
            "line 2: Request tokens = 'x'; allowed: a whole number from 0",
        ),
        (
            BURST + "5,GPT-4,9,0,9,API log\n",
            f"holds no arrivals (1 line(s) skipped: {SKIP_NO_OUTPUT})",
        ),
        (BURST + "1_000,GPT-4,9,3,12,API log\n", "line 2: Timestamp = '1_000'; allowed: sec"),
        (
            BURST + '5,"GPT\n4",x,3,12,API log\n',  # a quoted cell spans lines 2 and 3
            "line 3: Request tokens = 'x'",
        ),
    ],
)
def test_a_bad_trace_is_refused_naming_the_file_line_field_value_and_what_is_allowed(
    tmp_path, text, words
):
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert f"trace file {str(path)!r}" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize(
    ("text", "fmt", "lines"),
    [
        ("\n\n" + BURST + "5,GPT-4,9,3,12,API log\n", "burstgpt", [4]),  # blank lines first
        ("\r\n" + AZURE + "2023-11-16 18:15:46.6805900,3,4\r\n", "azure", [3]),
        ("\ufeff" + AZURE.replace("\n", "\r\n") + "2023-11-16 18:15:46,3,4\r\n", "azure", [2]),
        (  # a JSON string may hold U+2028 raw: not a line break
            '{"t_s": 0, "input_tokens": 9, "output_tokens": 2, "prefix": "a\u2028b", '
            '"prefix_tokens": 3}\n' + GOOD,
            "soaktop",
            [1, 2],
        ),
        (GOOD.replace("\n", "\r") * 2, "soaktop", [1, 2]),  # bare CRs
    ],
)
def test_blank_lines_bom_crlf_and_unicode_line_separators_are_read_as_written(
    tmp_path, text, fmt, lines
):
    path = tmp_path / "ok.trace"
    path.write_bytes(text.encode())
    trace = load_trace(path)
    assert trace.format == fmt and [a.line for a in trace.arrivals] == lines


def test_a_missing_file_and_a_directory_are_refused_in_words(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(tmp_path)


async def test_prompts_have_the_traces_token_counts_as_the_server_counts_them():
    for name in ("mooncake_sample.jsonl", "azure_sample.csv", "soaktop_sample.jsonl"):
        source = await _source(SAMPLES / name)
        trace = load_trace(SAMPLES / name)
        for n, arrival in enumerate(trace.arrivals):
            text, max_tokens = _prompt(source, n)
            assert on_target(arrival.input_tokens, await _chat(text)), (name, n)
            assert max_tokens == arrival.output_tokens


async def test_calibration_measures_the_tokenizer_and_checks_each_length_bucket():
    pool = await calibrate(
        load_trace(SAMPLES / "azure_sample.csv"),
        time_scale=2.0,
        seed=0,
        count_text=_bare,
        count_prompt=_chat,
    )
    # the simulated tokenizer: a space and a word are two tokens; a chat message costs 7
    assert (pool.tokens_per_word, pool.fixed_tokens, pool.calibrated) == (2.0, 7.0, True)
    buckets = {t.bit_length() for t, _ in pool.checks}
    assert len(buckets) == len(pool.checks) >= 3
    facts = pool.describe()
    assert facts["source"].startswith("trace:azure:") and facts["size"] == 30
    assert facts["trace"]["time_scale"] == 2.0 and facts["trace"]["calibration_worst_tokens"] <= 1


async def test_without_tokenize_nothing_is_claimed_calibrated():
    pool = await calibrate(
        load_trace(SAMPLES / "azure_sample.csv"),
        time_scale=1.0,
        seed=0,
        count_text=None,
        count_prompt=None,
    )
    assert not pool.calibrated and pool.describe()["trace"]["tokens_per_word"] is None


async def test_shared_hash_ids_send_the_same_leading_text_and_nothing_else_is_shared(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [([0, 1, 2], 1300), ([0, 1, 3], 1400), ([0, 4], 700), ([5], 300)]
    path.write_text(
        "".join(
            orjson.dumps(
                {"timestamp": k, "input_length": n, "output_length": 3, "hash_ids": ids}
            ).decode()
            + "\n"
            for k, (ids, n) in enumerate(rows)
        )
    )
    source = await _source(path)
    texts = [_prompt(source, n)[0] for n in range(4)]
    block = 256  # words of one 512-token block with this tokenizer (2 tokens a word)

    def words(text: str, a: int, b: int) -> list[str]:
        return text.split(" ")[1:][a:b]

    assert words(texts[0], 0, 2 * block) == words(texts[1], 0, 2 * block)  # ids 0, 1
    assert words(texts[0], 2 * block, 2 * block + 3) != words(texts[1], 2 * block, 2 * block + 3)
    assert words(texts[2], 0, block) == words(texts[0], 0, block)  # id 0 only
    assert words(texts[2], block, block + 3) != words(texts[0], block, block + 3)
    assert words(texts[3], 0, 3) != words(texts[0], 0, 3)  # no shared id, nothing shared
    assert source.request(3).prompt_id == 3


async def test_arrivals_without_shared_blocks_share_no_leading_words():
    source = await _source(SAMPLES / "azure_sample.csv")
    heads = {tuple(_prompt(source, n)[0].split(" ")[1:4]) for n in range(30)}
    assert len(heads) == 30
