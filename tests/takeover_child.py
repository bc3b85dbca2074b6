"""The crash tests' pipeline (`tests/crash_child.py`) on a PostgreSQL catalog, run in a child
process by the takeover tests: killed or stopped at `SPARKWAVE_CRASH_AT`, after which another
owner takes the warehouse over.

Usage: python -m tests.takeover_child WAREHOUSE PROGRESS_FILE, with the catalog's connection
string in $SPARKWAVE_TEST_CATALOG. It appends `i` to PROGRESS_FILE once every statement of batch
i is staged (acknowledged), then flushes; its log goes to stderr."""

from __future__ import annotations

import logging
import os
import sys

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.crash_child import run


def main(warehouse: str, progress: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000,
                           catalog=os.environ["SPARKWAVE_TEST_CATALOG"]) as s:
        run(s, progress, maintenance=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
