# The two commands that matter: `make run` and `make test`. Everything installs itself into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
EVAL   ?= ../shared/eval

.PHONY: run test test-fast wheel-check psql migrate lint bench bench-questions bench-retrieval bench-http bench-search bench-web eval fuzz soak clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)  ## serve on :8080 with the embedded PostgreSQL (or $$DATABASE_URL)
	$(PY) -m service serve

test: $(STAMP)  ## the whole test suite, on a real PostgreSQL (3 workers: tests mostly wait on I/O)
	$(PY) -m pytest -q -n 3

test-fast: $(STAMP)  ## everything but the `slow` tests (service processes, fuzzing): under a minute
	$(PY) -m pytest -q -n 3 -m "not slow"

wheel-check:  ## build the wheel, install it into a fresh venv outside the checkout, migrate, serve, read
	$(PYTHON) tests/wheel_check.py

psql: $(STAMP)  ## psql on the service's database
	$(PY) -m service psql

migrate: $(STAMP)
	$(PY) -m service migrate

lint: $(STAMP)
	$(VENV)/bin/ruff check service tests bench

bench: bench-questions bench-retrieval bench-http bench-search bench-web  ## every benchmark; results go into BENCHMARKS.md

bench-questions: $(STAMP)  ## ask-to-complete latency and throughput over real HTTP (bench/questions.py)
	$(PY) bench/questions.py --seconds 20 --mode both --processes 2

bench-retrieval: $(STAMP)  ## retrieval latency at 10,000 and 100,000 synthetic entries
	$(PY) bench/retrieval.py 10000 100000 --naive

bench-http: $(STAMP)  ## service vs bare aiohttp+asyncpg floor: GET /rfps/{id} and search
	$(PY) bench/http_bench.py

bench-search: $(STAMP)  ## search over 1,000,000 RFPs (BENCH_REUSE=1 keeps the loaded data)
	$(PY) bench/search_1m.py

bench-web: $(STAMP)  ## the web app's RFP page of an RFP with 1,000 items, server-side render p50/p95
	$(PY) bench/web_bench.py

eval: $(STAMP)  ## answer quality on the development set in $(EVAL)
	@if [ -d "$(EVAL)" ]; then \
		$(PY) -m service eval --kb $(EVAL)/kb.csv --questions $(EVAL)/dev_questions.csv \
			--labels $(EVAL)/dev_labels.csv; \
	else echo "skipped: no evaluation set at $(EVAL) (set EVAL=path)"; fi

fuzz: $(STAMP)  ## schemathesis against the OpenAPI description, a real server, ~3 minutes
	$(PY) tests/fuzz.py --max-time $${FUZZ_SECONDS:-180}

soak: $(STAMP)  ## two processes, mixed traffic, then consistency and memory checks (~3 minutes)
	$(PY) bench/soak.py --seconds $${SOAK_SECONDS:-150}

clean:
	rm -rf $(VENV) var/test
