# The two commands that matter: `make run` and `make test`. Everything installs itself into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test psql migrate lint bench eval fuzz clean bench-http bench-search

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)  ## serve on :8080 with the embedded PostgreSQL (or $$DATABASE_URL)
	$(PY) -m service serve

test: $(STAMP)  ## the whole test suite, on a real PostgreSQL
	$(PY) -m pytest -q

psql: $(STAMP)  ## psql on the service's database
	$(PY) -m service psql

migrate: $(STAMP)
	$(PY) -m service migrate

lint: $(STAMP)
	$(VENV)/bin/ruff check service tests

bench: bench-http bench-search  ## every benchmark; results go into BENCHMARKS.md by hand

bench-http: $(STAMP)  ## service vs bare aiohttp+asyncpg floor: GET /rfps/{id} and search
	$(PY) bench/http_bench.py

bench-search: $(STAMP)  ## search over 1,000,000 RFPs (BENCH_REUSE=1 keeps the loaded data)
	$(PY) bench/search_1m.py

clean:
	rm -rf $(VENV) var/test
