# Shardyard: the two commands a newcomer needs are `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: run test lint docs format bench clean lock

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Installs come from the lock files, so every machine gets the versions that were tested;
# pyproject.toml holds the ranges, `make lock` re-resolves them into the lock files.
LOCK_RUN := requirements.lock
LOCK_DEV := requirements-dev.lock

$(STAMP_RUN): pyproject.toml $(LOCK_RUN) | $(BIN)/python
	$(BIN)/pip install -q -r $(LOCK_RUN)
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# torch first, pinned, so that megatron-core never pulls a newer (CUDA) build.
$(STAMP_DEV): pyproject.toml $(LOCK_DEV) | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r $(LOCK_DEV)
	$(BIN)/pip install -q --no-deps -e .
	touch $@ $(STAMP_RUN)

# Re-resolve pyproject.toml's ranges (dev extra included) and write both lock files; the
# runtime lock is the runtime closure under the dev lock's versions.
lock: | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --upgrade -e '.[dev]'
	$(BIN)/pip freeze --exclude-editable | grep -v '^-e ' | sort -f > $(LOCK_DEV)
	$(BIN)/python -m pip install -q --dry-run --ignore-installed --report /tmp/shardyard-lock.json \
	  -c $(LOCK_DEV) -e .
	$(BIN)/python -c "import json; r=json.load(open('/tmp/shardyard-lock.json'))['install']; \
	  print('\n'.join(sorted((f\"{x['metadata']['name']}=={x['metadata']['version']}\" \
	  for x in r if not x.get('is_direct')), key=str.lower)))" > $(LOCK_RUN)

run: $(STAMP_RUN)
	DEBUG=$${DEBUG:-1} $(BIN)/python manage.py runstack

test: $(STAMP_DEV)
	SECRET_KEY=$${SECRET_KEY:-shardyard-test-key} $(BIN)/python -m pytest $(PYTEST_ARGS)

# ruff (style, imports at module level), mypy (the hints), vulture (dead code); each reads
# its settings from pyproject.toml. mypy's Django plugin imports webapp.settings: DEBUG=1
# unless set, so that no SECRET_KEY is needed to type-check.
lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DEBUG=$${DEBUG:-1} $(BIN)/mypy
	$(BIN)/vulture

# The references first (docs/gen.py: the CLI from its parsers, the API from its OpenAPI
# schema, the configuration from the code's reads), then the site into site/ (ignored by
# git); --strict makes a broken link or anchor fail (never with --quiet, which hides the
# warnings --strict counts). CI runs `make docs DOCS_GEN=--check`: a reference the code no
# longer matches fails instead of being written anew.
docs: $(STAMP_DEV)
	DEBUG=$${DEBUG:-1} $(BIN)/python docs/gen.py $(DOCS_GEN)
	$(BIN)/mkdocs build --strict --site-dir site

format: $(STAMP_DEV)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every side-by-side comparison in bench/ at reduced sizes (BENCH_ARGS=--full: full sizes);
# writes bench/results.md, the table the README shows.
bench: $(STAMP_DEV)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache site
