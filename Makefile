# The two commands that matter: `make run` and `make test`. Everything installs itself into .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test psql migrate lint bench eval fuzz clean

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

bench: $(STAMP)  ## question bench: ask-to-complete latency and throughput (bench/questions.py)
	$(PY) bench/questions.py

lint: $(STAMP)
	$(VENV)/bin/ruff check service tests

clean:
	rm -rf $(VENV) var/test
