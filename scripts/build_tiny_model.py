#!/usr/bin/env python3
"""Build (once) the tiny random-weight model that the real-engine tests serve with vLLM.

    VENV/bin/python scripts/build_tiny_model.py            # the cached model; prints its path
    VENV/bin/python scripts/build_tiny_model.py OUT_DIR    # build into OUT_DIR (if not built)
    VENV/bin/python scripts/build_tiny_model.py OUT_DIR --force

Runs inside the vLLM CPU venv (``scripts/vllm_cpu_env.sh``), which has torch, transformers
and tokenizers; soaktop's own venv does not. Fully offline and deterministic: the tokenizer
is trained on this Python's stdlib sources, the weights come from a fixed torch seed.

Contract (reused by ``tests/real_engine``):
  default OUT_DIR: ${SOAKTOP_CACHE:-$HOME/.cache/soaktop}/tiny-model-v1
  stamp: OUT_DIR/.soaktop-complete, written last (JSON: recipe, file digests); without it
         the directory is rebuilt from scratch
  last stdout line: OUT_DIR (progress goes to stderr)

The model: Llama, hidden 128, 2 layers, 4 heads (2 KV), untied embeddings, ~1.3 M
parameters; byte-level BPE (4,096 + 6 added tokens) with every whitespace character its
own pre-token; a Hermes/Qwen chat template with tools; ``<|im_end|>`` is EOS. Untied
embeddings and isolated whitespace keep a random model from filling grammar-constrained
JSON with whitespace until max_tokens. Adapted from ../shared/tools/build_tiny_model.py.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

# Bump NAME (and so the cache directory) whenever the recipe changes what is built.
NAME = "tiny-model-v1"
STAMP = ".soaktop-complete"
HIDDEN, LAYERS, HEADS, KV_HEADS = 128, 2, 4, 2
VOCAB, MAX_POS, DTYPE, SEED = 4096, 4096, "float32", 0
RECIPE = {
    "name": NAME,
    "arch": "llama",
    "hidden": HIDDEN,
    "layers": LAYERS,
    "heads": HEADS,
    "kv_heads": KV_HEADS,
    "vocab": VOCAB,
    "max_pos": MAX_POS,
    "dtype": DTYPE,
    "seed": SEED,
    "tie_word_embeddings": False,  # tied random weights make the model repeat its last token
    "isolate_whitespace": True,
}

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Hermes/Qwen-style tool tokens. vLLM's `hermes` tool parser looks these up in the vocab
# and refuses to start without them. Non-special (as in Qwen2.5), so they survive
# skip_special_tokens in the detokenizer.
EXTRA = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# Qwen2.5-style chat template with tools (Hermes tool-call format).
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + (message.content if message.content is string else '') + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""  # noqa: E501


def log(msg: str) -> None:
    print(f"[build_tiny_model] {msg}", file=sys.stderr, flush=True)


def default_out() -> Path:
    cache = os.environ.get("SOAKTOP_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "soaktop"
    )
    return Path(cache) / NAME


def corpus_files() -> list[str]:
    """The tokenizer's training text: this Python's stdlib modules, in a fixed order."""
    return sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


def build_tokenizer(vocab_size: int, isolate_ws: bool = True):
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if isolate_ws:
        # Every whitespace character its own pre-token: the vocab holds only single-char
        # whitespace tokens, so constrained JSON cannot drift into long indentation runs.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"), bl]
        )
    else:
        tok.pre_tokenizer = bl
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(corpus_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=MAX_POS,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.add_tokens(EXTRA, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path) -> dict[str, object]:
    """Write the model and tokenizer into ``out`` (an empty or absent directory)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    tok = build_tokenizer(VOCAB)
    vocab = len(tok)  # model vocab == tokenizer vocab: no unmapped ids
    eos_id = tok.convert_tokens_to_ids("<|im_end|>")
    pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 2,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POS,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype=DTYPE,
    )
    model = LlamaForCausalLM(cfg).to(getattr(torch, DTYPE))
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    # Also put the template into tokenizer_config.json (older loaders read it there).
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc.setdefault("chat_template", CHAT_TEMPLATE)
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "vocab": vocab,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "corpus_files": len(corpus_files()),
    }


def digests(d: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.iterdir())
        if p.is_file() and p.name != STAMP
    }


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One builder at a time (parallel test sessions share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure(out: Path, force: bool = False) -> Path:
    """Build ``out`` unless its stamp says it is complete; return it."""
    stamp = out / STAMP
    if stamp.is_file() and not force:
        log(f"cached: {out}")
        return out
    with locked(out.parent / f".{out.name}.lock"):
        if stamp.is_file() and not force:  # built by whoever held the lock before us
            log(f"cached: {out}")
            return out
        start = time.monotonic()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"building {out} ...")
        info = build(tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        meta = {
            "recipe": RECIPE,
            **info,
            "python": sys.version.split()[0],
            "built_s": round(time.monotonic() - start, 1),
            "files": digests(out),
        }
        # Written last: its presence means every other file is complete.
        tmp_stamp = out / (STAMP + ".tmp")
        tmp_stamp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        tmp_stamp.rename(stamp)
        log(f"built in {meta['built_s']} s: {info['params']} parameters, vocab {info['vocab']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "out", nargs="?", type=Path, help=f"output directory (default: the cache's {NAME})"
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if the stamp is present")
    a = ap.parse_args(argv)
    out = ensure((a.out or default_out()).absolute(), force=a.force)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
