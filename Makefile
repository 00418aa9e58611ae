# specdec-collector — every target sets up what it needs on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
export SPECDEC_DATABASE_URL ?= sqlite:///./data/specdec.db
# The PostgreSQL half of the suite runs here; `make postgres` prepares it on Debian (as root).
export SPECDEC_TEST_POSTGRES_URL ?= postgresql+psycopg://specdec:specdec@127.0.0.1:5432/specdec_test

.PHONY: run test lint format bench simulate postgres clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(VENV)/.installed $@

run: $(VENV)/.installed ## serve on $(HOST):$(PORT), SQLite under ./data (migrations first)
	$(BIN)/specdec serve --host $(HOST) --port $(PORT)

simulate: $(VENV)/.installed ## a vLLM-shaped /metrics on 127.0.0.1:9000 whose counters grow
	$(BIN)/specdec simulate --port 9000

test: $(VENV)/.installed-dev ## the whole test suite
	$(BIN)/pytest

lint: $(VENV)/.installed-dev ## ruff (lint + format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy app tests migrations

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(VENV)/.installed-dev ## speed figures, measured side by side in one run
	$(BIN)/python -m tests.bench.bench_extract
	$(BIN)/python -m tests.bench.bench_start
	$(BIN)/python -m tests.bench.bench_storage
	$(BIN)/python -m tests.bench.bench_replicas
	$(BIN)/python -m tests.bench.bench_load

postgres: ## start the machine's PostgreSQL 15 and create the test role and a fresh database
	bash .ci/postgres.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
