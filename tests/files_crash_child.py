"""A posix_fs source run in a child process by the files crash test, killed by `SPARKWAVE_CRASH_AT`.

Usage: python -m tests.files_crash_child WAREHOUSE ROOT. The folder holds the files `land` wrote;
the child reads them a few per epoch into two MVs until it is killed."""

from __future__ import annotations

import sys
from pathlib import Path

import sparkwave
from sparkwave.core.spark import create_spark
from tests import TEST_MASTER
from tests.integration.test_files_source import BAD, MVS, source_sql
from tests.lakehouse_util import file_rows, write_csv

FILES = 12
BAD_FILES = 3  # every fourth file has a malformed line


def land(root: Path) -> dict[str, list[tuple]]:
    written = {}
    for i in range(FILES):
        name = f"f{i:02d}.csv"
        written[name] = file_rows(25, i * 25)
        write_csv(root, name, written[name], BAD if i % 4 == 1 else None)
    return written


def main(warehouse: str, root: str) -> None:
    spark = create_spark(TEST_MASTER)
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        s.sql(source_sql(Path(root), per_epoch=50))
        for name, sql in MVS.items():
            s.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
        for _ in range(FILES + 2):
            s.flush()


if __name__ == "__main__":
    main(*sys.argv[1:3])
