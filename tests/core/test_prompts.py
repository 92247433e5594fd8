"""Prompt pools: both ShareGPT forms, JSONL, errors that name the file, stable hashes."""

import json

import orjson
import pytest

from loadgen.prompts import BodyBuilder, PromptPoolError, load_file, synthetic


def test_sharegpt_both_turn_forms(tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "hi A"}, {"from": "gpt", "value": "x"}]},
        {"conversations": [{"role": "user", "content": "hi B"}]},
        {"conversations": [{"from": "gpt", "value": "no user turn"}]},
    ]
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(data))
    pool = load_file(f, seed=3)
    assert sorted(p.text for p in pool.prompts) == ["hi A", "hi B"]
    assert pool.source.startswith("sharegpt:")


def test_jsonl_and_cycling(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one"}\n"two"\n{"text": "three"}\n')
    pool = load_file(f)
    assert {pool.pick(i).text for i in range(3)} == {"one", "two", "three"}
    assert pool.pick(0) == pool.pick(3)  # cycled


def test_jsonl_error_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "ok"}\n{"nope": 1}\n')
    with pytest.raises(PromptPoolError, match=r"bad.jsonl line 2"):
        load_file(f)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(PromptPoolError, match="does not exist"):
        load_file(tmp_path / "absent.json")


def test_hash_depends_on_content_and_seed_order(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("".join(f'"p{i}"\n' for i in range(20)))
    assert load_file(f, seed=1).sha256 == load_file(f, seed=1).sha256
    assert load_file(f, seed=1).sha256 != load_file(f, seed=2).sha256


async def test_synthetic_calibrates_with_the_server_count():
    async def two_tokens_per_word(text: str) -> int:
        return 2 * len(text.split())

    pool = await synthetic(count=4, target_tokens=100, count_tokens=two_tokens_per_word)
    assert all(p.nominal_tokens == 100 for p in pool.prompts)
    assert len(pool.pick(0).text.split()) == 50
    assert pool.text_for(7, pool.pick(7)) != pool.text_for(11, pool.pick(11))  # unique prefixes


async def test_synthetic_without_tokenizer_leaves_nominal_unknown():
    pool = await synthetic(count=2, target_tokens=10)
    assert pool.describe()["nominal_input_tokens_mean"] is None


def test_body_asks_for_usage_and_never_sends_a_seed():
    body = orjson.loads(BodyBuilder(model="m", max_tokens=64, ignore_eos=True).build("hello"))
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["ignore_eos"] is True and "seed" not in body
