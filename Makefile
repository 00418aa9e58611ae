# specdec-collector — every target sets up what it needs on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
export SPECDEC_DATABASE_URL ?= sqlite:///./data/specdec.db
# The suite runs its PostgreSQL half on a throwaway server of its own unless
# SPECDEC_TEST_POSTGRES_URL names one (`make postgres` prints the URL of Debian's).
# Test processes: the suite mostly waits on the collectors, servers and browsers it starts, so
# two per core and one more keep the cores busy (on 2 cores, alternating runs: 3:48-4:01 with
# five against 3:59-4:06 with four; one per core took 6:12); at most 8.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( 2 * n + 1 < 8 ? 2 * n + 1 : 8 )))

.PHONY: run test test-engines engines lint format bench simulate demo postgres clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The service's dependencies at the versions of docker/requirements.lock (what the image installs);
# the tools of [dev] at the newest that fit.
$(VENV)/.installed: pyproject.toml docker/requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c docker/requirements.lock -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml docker/requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c docker/requirements.lock -e ".[dev]"
	touch $(VENV)/.installed $@

lock: | $(BIN)/python ## pin the service's dependencies anew into docker/requirements.lock (newest that fit)
	@mkdir -p build
	$(BIN)/python -m pip install --quiet --dry-run --ignore-installed --report build/resolved.json .
	@( echo "# The service's dependencies, pinned: \`make lock\` writes this file (do not edit)."; \
	  $(BIN)/python -c "import json; r = json.load(open('build/resolved.json')); \
	  pins = sorted((m['name'].lower().replace('_', '-'), m['version']) for m in (i['metadata'] for i in r['install'])); \
	  print('\n'.join(f'{n}=={v}' for n, v in pins if n != 'specdec-collector'))" ) > docker/requirements.lock

run: $(VENV)/.installed ## serve on $(HOST):$(PORT), SQLite under ./data (migrations first)
	$(BIN)/specdec serve --host $(HOST) --port $(PORT)

simulate: $(VENV)/.installed ## a vLLM-shaped /metrics on 127.0.0.1:9000 whose counters grow
	$(BIN)/specdec simulate --port 9000

demo: $(VENV)/.installed ## simulator + collector + a short load through `specdec run`, then the report
	@set -e; dir=$$(mktemp -d); \
	echo "== starting a simulated vLLM server on :9100 and the collector on :8100 (migrating $$dir/demo.db) =="; \
	$(BIN)/specdec simulate --port 9100 --instances 2 --drafts-per-s 0 > $$dir/simulator.log 2>&1 & sim=$$!; \
	SPECDEC_DATABASE_URL=sqlite:///$$dir/demo.db $(BIN)/specdec serve --port 8100 > $$dir/collector.log 2>&1 & col=$$!; \
	trap 'kill $$sim $$col 2>/dev/null' EXIT; \
	$(BIN)/specdec wait-ready http://127.0.0.1:8100/healthz http://127.0.0.1:9100/v1/models; \
	echo "== both ready: a load of 400 requests through specdec run (2 data-parallel instances) =="; \
	$(BIN)/specdec run --server http://127.0.0.1:8100 --target 127.0.0.1:9100 --id demo --sample-interval 0.5 \
	  --output-dir $$dir -- $(BIN)/specdec load --url http://127.0.0.1:9100 --requests 400 --concurrency 16 --max-tokens 64; \
	echo "== the JSON result and the logs are in $$dir =="

test: $(VENV)/.installed-dev ## the whole test suite (PostgreSQL, Chromium: see README)
	@# Compiled once here: each collector the suite starts would otherwise compile the package
	@# anew where bytecode is not written (PYTHONDONTWRITEBYTECODE), ~0.1 s of CPU a start.
	$(BIN)/python -m compileall -q app tests
	@# pytest keeps the test modules as it rewrites them (for its asserts) only where bytecode
	@# may be written: without it, each of the workers rewrote every module, ~2 s of CPU each.
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --durations=15 $(PYTEST_ARGS)

engines: $(VENV)/.installed-dev ## install the real engines into ./.engines once (vLLM CPU, llama-server, a model)
	$(BIN)/python -m tests.real_engines.provision all

test-engines: engines ## the real-engine tier: windows around a real vLLM and a real llama.cpp
	SPECDEC_TEST_ENGINES=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest tests/real_engines --durations=10 $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev ## ruff (lint + format check) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy app/specdec_collector tests

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(VENV)/.installed-dev ## speed figures, measured side by side in one run
	$(BIN)/python -m tests.bench

postgres: ## optional: Debian's PostgreSQL 15 for the suite (as root); prints SPECDEC_TEST_POSTGRES_URL
	bash .ci/postgres.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
