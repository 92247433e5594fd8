#!/usr/bin/env bash
# Build (once) llama.cpp's `llama-server`, CPU only, and print its path on the last line.
#
#   scripts/llama_server_env.sh                  # build if needed, print the binary's path
#   LLAMA_SERVER=$(scripts/llama_server_env.sh | tail -n1)
#
# No Debian package ships llama.cpp, but llama-cpp-python's source distribution on PyPI
# vendors the whole llama.cpp tree (tools/server included): download it once (the only
# network step), unpack it, build the one target with cmake (no network at build time).
#
# Contract (reused by scripts/build_tiny_gguf.py and tests/real_engine/test_llamacpp_*):
#   dir:    ${SOAKTOP_CACHE:-$HOME/.cache/soaktop}/llama-server-<ver>
#   binary: <dir>/bin/llama-server (statically linked against ggml: BUILD_SHARED_LIBS=OFF)
#   source: <dir>/src (from the llama.cpp tree, only convert_hf_to_gguf.py, conversion/,
#           gguf-py/ and LICENSE are kept: ~2 MB; the whole cache is ~17 MB)
#   stamp:  <dir>/.soaktop-complete (written last; its absence means "rebuild from scratch")
#   last stdout line: the binary's path (all progress goes to stderr)
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SOAKTOP_CACHE:-$HOME/.cache/soaktop}"
DIR="$CACHE/llama-server-$VERSION"
STAMP="$DIR/.soaktop-complete"
BIN="$DIR/bin/llama-server"
JOBS="${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
PY="${PYTHON:-python3}"

log() { printf '[llama_server_env] %s\n' "$*" >&2; }

if [[ -f "$STAMP" && -x "$BIN" ]]; then
    log "cached: $BIN ($(cat "$STAMP"))"
    echo "$BIN"
    exit 0
fi

for tool in cmake g++ make tar; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        log "ERROR: '$tool' is missing; run scripts/setup_system.sh (or: apt-get install -y cmake g++ make)"
        exit 2
    fi
done

mkdir -p "$CACHE"
# One builder at a time (parallel test sessions / CI jobs share the cache).
exec 9>"$CACHE/.llama-server-$VERSION.lock"
flock 9
if [[ -f "$STAMP" && -x "$BIN" ]]; then # built by whoever held the lock before us
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

start=$(date +%s)
rm -rf "$DIR"
mkdir -p "$DIR/dl"
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    log "ERROR: '$PY -m pip' is not available (set PYTHON=<a python with pip>, e.g. .venv/bin/python)"
    exit 2
fi
log "downloading llama-cpp-python==$VERSION's sdist (~77 MB) ..."
# --no-binary names the one package: its build dependencies (scikit-build-core, read to
# prepare its metadata) may come as wheels. pipefail keeps pip's status through grep.
if ! "$PY" -m pip download -q --no-binary llama-cpp-python --no-deps \
    -d "$DIR/dl" "llama-cpp-python==$VERSION" 2>&1 |
    { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2; then
    log "ERROR: '$PY -m pip download llama-cpp-python==$VERSION' failed (PyPI is needed once, to fetch the sdist)"
    exit 1
fi
SDIST="$DIR/dl/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
    log "ERROR: pip saved no $SDIST (got: $(ls "$DIR/dl" | tr '\n' ' '))"
    exit 1
fi
mkdir -p "$DIR/unpack"
tar -xzf "$SDIST" -C "$DIR/unpack"
# The sdist's llama.cpp tree is vendor/llama.cpp; keep only it (the bindings are not used).
TREE=$(ls -d "$DIR/unpack/"*/vendor/llama.cpp 2>/dev/null | head -n1 || true)
if [[ -z "$TREE" || ! -f "$TREE/tools/server/server.cpp" ]]; then
    log "ERROR: no vendor/llama.cpp with tools/server in $SDIST (its layout changed?)"
    exit 1
fi
mv "$TREE" "$DIR/src"
rm -rf "$DIR/unpack" "$DIR/dl"

log "building llama-server (CPU only, -j$JOBS; about 4.5 min on 2 cores) ..."
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$DIR/cmake-configure.log" 2>&1 || {
    tail -n 30 "$DIR/cmake-configure.log" >&2
    log "ERROR: cmake configure failed (log: $DIR/cmake-configure.log)"
    exit 1
}
cmake --build "$DIR/build" --target llama-server -j"$JOBS" >"$DIR/cmake-build.log" 2>&1 || {
    tail -n 30 "$DIR/cmake-build.log" >&2
    log "ERROR: cmake build failed (log: $DIR/cmake-build.log)"
    exit 1
}
mkdir -p "$DIR/bin"
cp "$DIR/build/bin/llama-server" "$BIN"
# The object files and the sources (~176 MB) are not read again: keep only what
# scripts/build_tiny_gguf.py runs (the converter, its package and gguf-py; ~2 MB).
rm -rf "$DIR/build"
mkdir "$DIR/keep"
mv "$DIR/src/convert_hf_to_gguf.py" "$DIR/src/conversion" "$DIR/src/gguf-py" "$DIR/src/LICENSE" \
    "$DIR/keep/"
rm -rf "$DIR/src"
mv "$DIR/keep" "$DIR/src"

# Smoke: the binary runs and says its version.
"$BIN" --version >"$DIR/version.txt" 2>&1 || {
    cat "$DIR/version.txt" >&2
    log "ERROR: '$BIN --version' failed"
    exit 1
}

end=$(date +%s)
printf 'llama-cpp-python==%s (%s) built %s in %ss\n' "$VERSION" \
    "$(grep -m1 -o 'version: .*' "$DIR/version.txt" || echo 'version ?')" \
    "$(date -u +%FT%TZ)" "$((end - start))" >"$STAMP"
log "done in $((end - start)) s"
echo "$BIN"
