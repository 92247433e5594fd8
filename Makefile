# Two entry points a newcomer needs: `make demo` and `make test`. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-real real-engine-env system-deps lint check bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/soaktop demo $(ARGS)

# System packages the suite needs (tmux, chromium, cmake, g++): installed as root with
# apt, otherwise the exact command is printed and make stops (never a pass that skipped them).
system-deps:
	$(if $(TEST_ENV),,SOAKTOP_SKIP_REAL_ENGINE=1 )bash scripts/setup_system.sh

# What the real-engine tier serves, unless SOAKTOP_SKIP_REAL_ENGINE=1 (or
# PYTEST_ARGS=--no-real-engine) skips that tier: then nothing is built for it.
ifeq ($(filter-out 0,$(SOAKTOP_SKIP_REAL_ENGINE))$(findstring --no-real-engine,$(PYTEST_ARGS)),)
TEST_ENV := real-engine-env
endif

# -rs lists every skipped test with its reason (e.g. the real-engine tier under
# --no-real-engine or SOAKTOP_SKIP_REAL_ENGINE=1).
test: $(STAMP) system-deps $(TEST_ENV)
	$(BIN)/pytest -q -rs $(PYTEST_ARGS)

# The real-engine tier alone: a real vLLM 0.32 and llama.cpp's llama-server on the CPU
# (tests/real_engine).
test-real: $(STAMP) real-engine-env
	$(BIN)/pytest -q -rs -m real_engine tests/real_engine $(PYTEST_ARGS)

# Build (once; cached under ${SOAKTOP_CACHE:-~/.cache/soaktop}) what that tier serves: the
# vLLM CPU venv (~2 min cold) and tiny model, llama.cpp's llama-server (~4.5 min cold on 2
# cores) and the tiny model as GGUF. Warm, each step only checks its stamp.
real-engine-env: system-deps
	VLLM_VENV=$$(bash scripts/vllm_cpu_env.sh | tail -n1) && \
		"$$VLLM_VENV/bin/python" scripts/build_tiny_model.py && \
		bash scripts/llama_server_env.sh && \
		"$$VLLM_VENV/bin/python" scripts/build_tiny_gguf.py

# The last step: the published JSON Schema (schema/) is what the record models generate.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m soak.record.schema --check

# Day-to-day loop (about 40 s on 2 cores, under a minute): lint, types (package and tests),
# layer contracts and the pure and seam tests — no runner or simulated-engine soak, no
# browser, no tmux, no real engine. Those tests spend most of their time waiting (sockets,
# timers, helper processes: ~22 s of CPU in ~58 s serially), so they run on one pytest-xdist
# worker per core; CHECK_WORKERS=0 runs them serially. make test stays serial: its
# end-to-end tiers measure the client's own CPU and loop lag.
FAST_TESTS := tests/core tests/loadgen tests/probes tests/simengine
CHECK_WORKERS ?= auto
check: lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(CHECK_WORKERS) \
		-m "not e2e and not real_engine and not gpu" $(FAST_TESTS)

bench: $(STAMP)
	$(BIN)/python bench/client_cost.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
