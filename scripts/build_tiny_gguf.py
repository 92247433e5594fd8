#!/usr/bin/env python3
"""Convert (once) the tiny test model to GGUF, for the llama.cpp tier of the real-engine tests.

    VENV/bin/python scripts/build_tiny_gguf.py            # the cached GGUF; prints its path
    VENV/bin/python scripts/build_tiny_gguf.py --force    # convert again

Runs inside the vLLM CPU venv (``scripts/vllm_cpu_env.sh``): llama.cpp's converter needs
torch, transformers and numpy, which soaktop's own venv does not have. The converter is
llama.cpp's own ``convert_hf_to_gguf.py`` from the tree ``scripts/llama_server_env.sh``
unpacked (its ``gguf-py`` first on ``sys.path``), run in this process.

The tiny model's byte-level BPE tokenizer is the project's own, so the converter does not
recognise its pre-tokenizer (it hashes the tokens of a test string against the models it
knows) and refuses it. It is told ``gpt-2`` (the plain byte-level regex) by replacing
``TextModel.get_vocab_base_pre`` in memory; the vendored file on disk is never edited.
llama.cpp then splits text slightly differently from the HF tokenizer (whitespace runs are
not isolated one character each), which no test relies on: token counts are reconciled
against llama.cpp's own counters.

Contract (reused by ``tests/real_engine/llama_server.py``):
  source model: scripts/build_tiny_model.py's output (built first if absent)
  out:   ${SOAKTOP_CACHE:-$HOME/.cache/soaktop}/tiny-gguf-v1/tiny.gguf (f32, ~5.4 MB)
  stamp: <out dir>/.soaktop-complete, written last (JSON: source stamp digest, sha256)
  last stdout line: the .gguf path (progress goes to stderr)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build_tiny_model  # noqa: E402  (a sibling script, not a package)

# Bump NAME (and so the cache directory) whenever the recipe changes what is built.
NAME = "tiny-gguf-v1"
FILE = "tiny.gguf"
STAMP = ".soaktop-complete"
PRE_TOKENIZER = "gpt-2"


def log(msg: str) -> None:
    print(f"[build_tiny_gguf] {msg}", file=sys.stderr, flush=True)


def default_out() -> Path:
    return build_tiny_model.default_out().parent / NAME


def llama_src() -> Path:
    """The unpacked llama.cpp tree (``llama_server_env.sh`` builds it if absent)."""
    p = subprocess.run(
        ["bash", str(HERE / "llama_server_env.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise SystemExit(f"scripts/llama_server_env.sh failed (exit {p.returncode})")
    src = Path(lines[-1]).parent.parent / "src"
    if not (src / "convert_hf_to_gguf.py").is_file():
        raise SystemExit(f"no convert_hf_to_gguf.py under {src}")
    return src


def convert(src: Path, model: Path, out_file: Path) -> None:
    """Run llama.cpp's converter on ``model`` into ``out_file``, pre-tokenizer forced."""
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    import conversion.base as base  # llama.cpp's converter package, from ``src``

    def gpt2_pre(self: Any, tokenizer: Any) -> str:
        return PRE_TOKENIZER

    base.TextModel.get_vocab_base_pre = gpt2_pre
    spec = importlib.util.spec_from_file_location(
        "convert_hf_to_gguf", src / "convert_hf_to_gguf.py"
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {src / 'convert_hf_to_gguf.py'}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(model), "--outfile", str(out_file), "--outtype", "f32"]
    try:
        mod.main()
    finally:
        sys.argv = argv


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ensure(out: Path, force: bool = False) -> Path:
    """Convert into ``out`` unless its stamp says it is complete; return the .gguf path."""
    stamp = out / STAMP
    if stamp.is_file() and (out / FILE).is_file() and not force:
        log(f"cached: {out / FILE}")
        return out / FILE
    with build_tiny_model.locked(out.parent / f".{out.name}.lock"):
        if stamp.is_file() and (out / FILE).is_file() and not force:
            log(f"cached: {out / FILE}")
            return out / FILE
        start = time.monotonic()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        model = build_tiny_model.ensure(build_tiny_model.default_out())
        src = llama_src()
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log(f"converting {model} with {src / 'convert_hf_to_gguf.py'} ...")
        convert(src, model, tmp / FILE)
        meta = {
            "name": NAME,
            "pre_tokenizer": PRE_TOKENIZER,
            "source_model": str(model),
            "source_stamp_sha256": sha256(model / build_tiny_model.STAMP),
            "llama_src": str(src),
            "sha256": sha256(tmp / FILE),
            "bytes": (tmp / FILE).stat().st_size,
            "built_s": round(time.monotonic() - start, 1),
        }
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        # Written last: its presence means the .gguf is complete.
        tmp_stamp = out / (STAMP + ".tmp")
        tmp_stamp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        tmp_stamp.rename(stamp)
        log(f"converted in {meta['built_s']} s: {meta['bytes']} bytes")
    return out / FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("out", nargs="?", type=Path, help=f"output directory (default: {NAME})")
    ap.add_argument("--force", action="store_true", help="convert again even if stamped")
    a = ap.parse_args(argv)
    print(ensure((a.out or default_out()).absolute(), force=a.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
