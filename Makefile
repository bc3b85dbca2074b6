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

# The oracle, backfill, Kafka, sink, big-epoch and Nexmark tests on a Spark standalone cluster: a master and two
# workers (two cores each: the tests' driver and a child's at once) started from the pip-installed PySpark on
# 127.0.0.1 by `sparkwave.devtools.spark_cluster`, which stops them afterwards; with `sparkwave serve --spark-master`
# (tests/integration/test_standalone.py), then a worker SIGKILLed mid-task on clusters of the test's own.
# `make test-cluster CLUSTER=local-cluster` runs the same tests on `local-cluster[2,1,1024]` (executor JVMs that are
# the driver's children, no daemons). `make test` runs smaller scenarios: test_cluster.py, test_standalone.py.
CLUSTER ?= standalone
CLUSTER_TESTS := tests/integration/test_oracle.py tests/integration/test_dataflow_oracle.py \
	tests/integration/test_backfill.py tests/integration/test_chunked_backfill.py tests/integration/test_kafka.py \
	tests/integration/test_sinks.py tests/integration/test_parity.py tests/integration/test_nexmark.py
test-cluster: java $(VENV)/.installed
ifeq ($(CLUSTER),local-cluster)
	SPARKWAVE_TEST_MASTER='local-cluster[2,1,1024]' $(BIN)/python -m pytest -n 0 $(CLUSTER_TESTS)
else
	$(BIN)/python -m sparkwave.devtools.spark_cluster -- $(BIN)/python -m pytest -n 0 $(CLUSTER_TESTS) \
		tests/integration/test_standalone.py
	$(BIN)/python -m pytest -n 0 -m chaos tests/crash/test_worker_kill.py
endif
# Spark Connect: a local Connect server (sparkwave.devtools.spark_connect); the generated-DML oracle and
# every crash point on it (`make test` runs the fixed scenario and two crash points)
	SPARKWAVE_TEST_CONNECT_FULL=1 $(BIN)/python -m pytest -n 0 tests/integration/test_connect.py \
		tests/crash/test_connect_crash.py

bench: java $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.run_all

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
