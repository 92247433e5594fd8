"""Build the bench's local tokenizer (no network): byte-level BPE trained on this Python's
stdlib sources, saved as a Hugging Face tokenizer directory that ``vllm bench serve
--tokenizer DIR`` loads offline.

Adapted from the project's tiny-model builder (tokenizer part only; same recipe as the
tiny model's tokenizer: 4,096 BPE merges + special tokens, whitespace isolated, Hermes/Qwen
chat template). Needs ``tokenizers`` and ``transformers`` — run it with the vLLM CPU venv's
python:

    $VLLM_VENV/bin/python bench/build_tokenizer.py OUT_DIR
"""

from __future__ import annotations

import glob
import json
import os
import sys
import sysconfig

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EXTRA = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content if message.content is string"
    " else '') + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build(out: str, vocab_size: int = 4096) -> None:
    from tokenizers import (  # type: ignore[import-not-found]
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast  # type: ignore[import-not-found]

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=1 << 20,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.add_tokens(EXTRA, special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    tmp = out + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    fast.save_pretrained(tmp)
    with open(os.path.join(tmp, "build.json"), "w") as f:
        json.dump({"vocab": len(fast), "corpus_files": len(files)}, f)
    # A stub model config: vLLM's tokenizer loader reads config.json (model_type) first.
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "vocab_size": len(fast)}, f)
    if os.path.isdir(out):
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build(sys.argv[1])
    print(sys.argv[1])
