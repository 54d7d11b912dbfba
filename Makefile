# The two commands that matter: `make run` and `make test`. Everything installs itself into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The development sets (../shared/eval from the main checkout, ../../shared/eval from a worktree).
EVAL   ?= $(firstword $(wildcard ../shared/eval ../../shared/eval) ../shared/eval)

.PHONY: run test test-fast test-pgbouncer soak-restart bench-pgbouncer wheel-check psql migrate lint bench bench-questions bench-retrieval bench-http bench-search bench-web bench-webhooks bench-item-search eval fuzz soak clean

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

# The second pass checks how the service talks to the database (statements, transactions, LISTEN,
# locks, reconnects), not what it computes: tests with no database (architecture, config), or whose
# cost is CPU on results the first pass already checked (answer quality, ranking, the ONNX model,
# upload parser limits), run once, in `make test`. Keeps CI under 15 minutes.
PGBOUNCER_SKIP := tests/architecture tests/service/test_config.py tests/answering/test_quality.py \
	tests/answering/test_retrieval_ranking.py tests/answering/test_embeddings_onnx.py \
	tests/domain/test_import_limits.py

test-pgbouncer: $(STAMP)  ## the database-facing tests again: the system's PostgreSQL (Debian's) through PgBouncer in transaction mode; 4 workers: no slow tests here, and they wait on the pooler
	$(PY) tests/pgservers.py -- $(PY) -m pytest -q -n 4 -m "not slow" $(addprefix --ignore=,$(PGBOUNCER_SKIP))

wheel-check:  ## build the wheel, install it into a fresh venv outside the checkout, migrate, serve, read
	$(PYTHON) tests/wheel_check.py

psql: $(STAMP)  ## psql on the service's database
	$(PY) -m service psql

migrate: $(STAMP)
	$(PY) -m service migrate

lint: $(STAMP)
	$(VENV)/bin/ruff check service tests bench

bench: bench-questions bench-retrieval bench-http bench-search bench-web  ## every benchmark; results go into BENCHMARKS.md

bench-questions: $(STAMP)  ## ask-to-complete latency and throughput over real HTTP, dense (default) and lexical floor (bench/questions.py)
	$(PY) bench/questions.py --seconds 20 --mode both --processes 2 --floor

bench-retrieval: $(STAMP)  ## retrieval latency at 10,000 and 100,000 synthetic entries, lexical and fused with dense
	$(PY) bench/retrieval.py 10000 100000 --naive

bench-http: $(STAMP)  ## service vs bare aiohttp+asyncpg floor: GET /rfps/{id} and search
	$(PY) bench/http_bench.py

bench-pgbouncer: $(STAMP)  ## bench-questions and bench-http on the system's PostgreSQL, direct then through PgBouncer, one run
	$(PY) tests/pgservers.py -- sh -c '\
		set -e; q="$(PY) bench/questions.py --seconds $${BENCH_SECONDS:-10} --mode closed --processes 2 --embeddings none"; \
		echo "== questions, direct"; $$q; echo "== questions, PgBouncer"; BENCH_POOLER_URL=$$PGBOUNCER_URL $$q; \
		echo "== http, direct"; $(PY) bench/http_bench.py; \
		echo "== http, PgBouncer"; BENCH_POOLER_URL=$$PGBOUNCER_URL $(PY) bench/http_bench.py'

bench-search: $(STAMP)  ## search over 1,000,000 RFPs (BENCH_REUSE=1 keeps the loaded data)
	$(PY) bench/search_1m.py

bench-web: $(STAMP)  ## the web app's RFP page of an RFP with 1,000 items, server-side render p50/p95
	$(PY) bench/web_bench.py

bench-item-search: $(STAMP)  ## an RFP's item search at 20,000 items with and without its trigram index, and the index's cost on answer writes
	$(PY) bench/item_search.py

bench-webhooks: $(STAMP)  ## webhook delivery throughput and the audit/outbox cost per write (short)
	$(PY) bench/webhooks.py --events 1000 --writes 2000

eval: $(STAMP)  ## answer quality on both development sets ($(EVAL) and $(EVAL)/dev2), in-sample and cross-validated
	@if [ -d "$(EVAL)" ]; then \
		$(PY) -m service eval --set $(EVAL) --set $(EVAL)/dev2 $(EVAL_ARGS); \
	else echo "skipped: no evaluation set at $(EVAL) (set EVAL=path)"; fi

fuzz: $(STAMP)  ## schemathesis against the OpenAPI description, a real server, ~3 minutes
	$(PY) tests/fuzz.py --max-time $${FUZZ_SECONDS:-180}

soak: $(STAMP)  ## two processes, mixed traffic, then consistency and memory checks (~3 minutes), then soak-restart
	$(PY) bench/soak.py --seconds $${SOAK_SECONDS:-150}
	$(MAKE) soak-restart

soak-restart: $(STAMP)  ## PostgreSQL, then PgBouncer, restarted under traffic on two processes (~2 minutes)
	$(PY) bench/soak_restart.py --seconds $${SOAK_RESTART_SECONDS:-60}

clean:
	rm -rf $(VENV) var/test
