#!/usr/bin/env bash
# Run HERE (a machine that reaches PyPI) before a session's device run: fetches, as
# CPython 3.12 x86-64 wheels, what soaktop needs that the lent GPU machine's image lacks
# (its python3 is 3.12 with aiohttp, uvloop, numpy, psutil, httpx, nvidia-ml-py,
# prometheus-client and pytest, and it reaches no network), at the versions of this
# checkout's .venv. They land in .whl/, which .git/info/exclude keeps out of git; the
# device run carries it (run's carry: [".whl"]) and bench/device_check.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
PIP=.venv/bin/pip
[[ -x $PIP ]] || { echo "no .venv here: run 'make setup' first" >&2; exit 2; }
# The packages the runner, the bench and tests/core/test_nvml.py import beyond the image's.
WANT="pydantic pydantic_core annotated-types typing-inspection orjson jsonschema
jsonschema-specifications referencing rpds-py pytest-asyncio"
pins=()
for name in $WANT; do
    v=$($PIP show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [[ -n $v ]] || { echo "$name is not in .venv" >&2; exit 2; }
    pins+=("$name==$v")
done
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
du -sh .whl
ls .whl
