# `make demo` and `make test` are the two commands of the README: each checks Java, creates
# .venv, installs sparkwave into it, then runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test unit chaos test-cluster bench lint java chromium

java:
	@bash scripts/check-java.sh

# The dashboard's browser test drives Debian's chromium: installed here where missing (as root).
chromium:
	@bash scripts/check-chromium.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: java $(VENV)/.installed
	$(BIN)/sparkwave demo

test: java chromium $(VENV)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest

# The Spark-free tests (tests/unit: no Java, under a minute), to run after every edit.
unit: $(VENV)/.installed
	$(BIN)/python -m pytest tests/unit

chaos: java $(VENV)/.installed
	$(BIN)/python -m pytest -m "" tests/crash \
		tests/integration/test_kafka.py tests/integration/test_kafka_source.py tests/integration/test_sinks.py

# The oracle, backfill, Kafka and Nexmark tests on two executor JVMs with Python workers of their own
# (`make test` runs a smaller scenario of its own, tests/integration/test_cluster.py, on the same kind of cluster).
test-cluster: java $(VENV)/.installed
	SPARKWAVE_TEST_MASTER='local-cluster[2,1,1024]' $(BIN)/python -m pytest -n 0 tests/integration/test_oracle.py \
		tests/integration/test_dataflow_oracle.py tests/integration/test_backfill.py tests/integration/test_chunked_backfill.py tests/integration/test_kafka.py \
		tests/integration/test_nexmark.py

bench: java $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.run_all

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
