# Shardyard: the two commands a newcomer needs are `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: run test lint format bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# torch first, pinned, so that megatron-core never pulls a newer (CUDA) build.
$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py runstack

test: $(STAMP_DEV)
	SECRET_KEY=$${SECRET_KEY:-shardyard-test-key} $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP_DEV)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP_DEV)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache
