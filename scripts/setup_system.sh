#!/usr/bin/env bash
# Install the system packages the test suite needs, or stop and say the command to run.
#
#   scripts/setup_system.sh          # called by `make test` and `.ci/run`
#
# The suite needs: tmux (the monitor's end-to-end tests drive it in a real tmux pane),
# chromium (the HTML reports are loaded in headless Chromium), cmake, g++ and make (to
# build llama.cpp's llama-server for the real-engine tier, scripts/llama_server_env.sh).
# Where a tool is missing: as root with apt-get, it is installed (Debian/Ubuntu package
# names); otherwise this exits 1 printing the exact apt command, because a run without
# them would skip those tests and pass — which is not a pass.
# SOAKTOP_SKIP_REAL_ENGINE=1 (set by make when that tier is skipped): cmake and g++ are
# not asked for.
# Exit: 0 everything present (or installed now); 1 missing and not installable here.
set -euo pipefail

log() { printf '[setup_system] %s\n' "$*" >&2; }

# tool:package pairs; the first tool name found on PATH satisfies the pair.
NEEDS=(
    "tmux:tmux"
    "chromium|chromium-browser|google-chrome:chromium"
    "make:make"
)
# cmake and g++ only build llama-server: not needed when the real-engine tier is skipped.
if [[ "${SOAKTOP_SKIP_REAL_ENGINE:-0}" == "0" ]]; then
    NEEDS+=("cmake:cmake" "g++:g++")
fi

missing=()
for need in "${NEEDS[@]}"; do
    tools=${need%%:*}
    pkg=${need##*:}
    found=""
    IFS='|' read -r -a names <<<"$tools"
    for t in "${names[@]}"; do
        if command -v "$t" >/dev/null 2>&1; then
            found=$t
            break
        fi
    done
    [[ -n "$found" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
    log "system packages present: ${NEEDS[*]##*:}"
    exit 0
fi

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing: ${missing[*]}"
    t0=$SECONDS
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null); then
        log "ERROR: '$cmd' failed"
        exit 1
    fi
    log "installed ${missing[*]} in $((SECONDS - t0)) s"
    exit 0
fi

log "ERROR: missing system packages: ${missing[*]}"
if command -v apt-get >/dev/null 2>&1; then
    log "run:  sudo sh -c '$cmd'"
else
    log "no apt-get here: install the equivalents of '${missing[*]}' with this system's package manager"
fi
log "(without them the suite would skip the tmux, browser and llama.cpp tests)"
exit 1
