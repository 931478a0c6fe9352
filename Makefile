# Two commands (see README): `make demo` sets up and predicts; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO_ARGS ?= resnet50 --workers 1-64:x2 --bandwidth 1Gbit --latency 20us --plot out/demo-resnet50.png --json out/demo-resnet50.json

.PHONY: demo test setup setup-full clean

# Core install: prediction needs no torch.
$(BIN)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $@

# Full install: torch first, pinned, so pip takes the CPU wheel (a bare `torch` pulls a CUDA build).
$(BIN)/.full: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[torch,dev,sweep]'
	touch $@ $(BIN)/.core

setup: $(BIN)/.core
setup-full: $(BIN)/.full

demo: $(BIN)/.core
	$(BIN)/sgdscale predict $(DEMO_ARGS)

test: $(BIN)/.full
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
