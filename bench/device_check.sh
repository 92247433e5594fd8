#!/usr/bin/env bash
# The device checks of issue 17, as ONE run on a lent GPU machine (16 cores, an NVIDIA
# GPU, Python 3.12, no network), sized to fit one command (~7 min) of a session's 15
# minutes of device time:
#   1. the real-NVML test (tests/core/test_nvml.py, marked gpu): memory, utilisation,
#      temperature and the Xid event set read off a real GPU;
#   2. bench/shard_scaling.py: 1, 2 and 4 shards at 4,096 and 16,384 paced streams
#      against a 6-process server, 10,000 streams at 1 token/s on 1 and 2 shards, and
#      merge + verify of the 4-shard row's journal stretched to 20 minutes (the 2-core
#      machine cannot show what shards scale to on cores of their own).
# Here first: `bash bench/device_wheels.sh` (fetches .whl/). Then, with the device tool:
#   run(command="bash bench/device_check.sh", carry=[".whl"], timeout_s=540)
# Everything lands in $OUT (machine.txt, nvml.txt, shard_scaling.txt).
# SOAKTOP_DEVICE_QUICK=1 shrinks every row (a dry run of the script on any machine).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/soaktop-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/soaktop-site:$PWD
else
    export PYTHONPATH=$PWD
fi
{
    echo "cores: $(nproc)"
    nvidia-smi -L 2>&1 || echo "nvidia-smi: not here"
    "$PY" --version
    "$PY" -c 'import aiohttp, uvloop, pydantic, orjson; print("imports ok")'
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

timeout 120 "$PY" -m pytest -q -rs -p no:cacheprovider -m gpu tests/core/test_nvml.py \
    2>&1 | tee "$OUT/nvml.txt"

# One shard on a core of its own carries more than a 2-core host shows (there, half a CPU
# carried ~80k tok/s once behind), so the rows go to 16,384 streams (819k tok/s offered)
# and the server gets 6 processes (one carries ~100k tok/s of one-token writes): 4 shards
# + 6 server processes + the coordinator fit 16 cores.
if [[ ${SOAKTOP_DEVICE_QUICK:-0} == 1 ]]; then
    rows=(--streams 256 --shards 1,2 --seconds 4 --many 500 --many-tokens 8 --many-seconds 8
        --hour-seconds 120 --server-procs 2)
else
    rows=(--streams 4096,16384 --shards 1,2,4 --seconds 10 --many-tokens 30
        --many-seconds 30 --hour-seconds 1200 --server-procs 6)
fi
timeout 420 "$PY" bench/shard_scaling.py "${rows[@]}" 2>&1 | tee "$OUT/shard_scaling.txt"
echo "device_check: files in $OUT"
