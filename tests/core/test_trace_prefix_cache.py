"""The simulated engine's prefix cache: chained full blocks, as vLLM's automatic prefix
caching counts them (what a replayed trace's shared blocks must show)."""

from __future__ import annotations

from simengine.prefix_cache import PrefixCache, prompt_tokens
from simengine.tokenizer import render_chat


def test_leading_full_blocks_hit_and_the_last_token_is_always_computed():
    cache = PrefixCache(block_size=16, capacity=100)
    tokens = [f"t{i}" for i in range(40)]
    assert cache.hit(tokens) == 0  # first sight: cached, nothing hit
    assert cache.hit(tokens) == 32  # two full blocks
    assert cache.hit(tokens[:32]) == 16  # the last block holds the last token: computed
    other = ["x", *tokens[1:]]
    assert cache.hit(other) == 0  # a different first token: every block's parent differs


def test_a_block_matches_only_when_everything_before_it_matches():
    cache = PrefixCache(block_size=4, capacity=100)
    cache.hit(list("abcdefghij"))
    assert cache.hit(list("abcdXfghij")) == 4  # block 2 differs, block 3 then cannot hit
    assert cache.hit(list("zzzzefghij")) == 0  # block 2 alone matches no chain


def test_the_least_recently_used_blocks_go_first():
    cache = PrefixCache(block_size=2, capacity=2)
    cache.hit(list("aabbc"))
    cache.hit(list("ccddx"))  # evicts a, b
    assert cache.hit(list("aabbc")) == 0


def test_a_shared_system_prompt_hits_its_block_aligned_tokens():
    system = {"role": "system", "content": "You are terse and exact. " * 6}
    bodies = [{"messages": [system, {"role": "user", "content": q}]} for q in ("hi", "bye")]
    cache = PrefixCache(block_size=16, capacity=1000)
    first, second = (prompt_tokens(b, chat=True) for b in bodies)
    assert len(first) == render_chat(bodies[0]["messages"])[1]  # what usage counts
    system_tokens = render_chat([system], add_generation_prompt=False)[1]
    assert cache.hit(first) == 0
    assert cache.hit(second) == system_tokens // 16 * 16


def test_completions_prompts_and_token_ids_count_as_usage_does():
    assert prompt_tokens({"prompt": "a b"}, chat=False) == ["a", " ", "b"]
    assert prompt_tokens({"prompt": [[1, 2, 3]]}, chat=False) == [1, 2, 3]
