"""The `sparkwave` command: `sql`, `jobs` and `demo`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkwave.core.errors import OwnershipError, SparkwaveError

REQUEST_WAIT_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkwave", description="A streaming database layer for Apache Spark.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_sql = sub.add_parser("sql", help="run SQL statements against a warehouse")
    p_sql.add_argument("--warehouse", required=True)
    src = p_sql.add_mutually_exclusive_group(required=True)
    src.add_argument("-e", dest="text", help="SQL text")
    src.add_argument("-f", dest="file", help="a file of SQL statements")
    p_jobs = sub.add_parser("jobs", help="show the jobs of a warehouse (works beside a running owner)")
    p_jobs.add_argument("--warehouse", required=True)
    p_jobs.add_argument("--watch", action="store_true", help="refresh every second until Ctrl-C")
    p_demo = sub.add_parser("demo", help="run the Nexmark demo pipeline")
    p_demo.add_argument("--warehouse", default="demo-warehouse")
    p_demo.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args(argv)
    console = Console()
    try:
        if args.command == "sql":
            return _sql(console, args.warehouse, args.text if args.text is not None else Path(args.file).read_text())
        if args.command == "jobs":
            return _jobs(console, args.warehouse, args.watch)
        from sparkwave.cli.demo import run_demo

        return run_demo(console, args.warehouse, args.seconds)
    except SparkwaveError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130


def _sql(console: Console, warehouse: str, text: str) -> int:
    from pyspark.sql import DataFrame

    from sparkwave.frontend.session import connect
    from sparkwave.frontend.statements import parse

    parse(text)  # malformed SQL fails here, before Spark starts (about 10 s), and nothing has run
    try:
        session = connect(warehouse)
    except OwnershipError as e:  # control statements still reach the owner, through the catalog
        return _send_requests(console, warehouse, text, e)
    with session:
        result = session.sql(text)
        if isinstance(result, DataFrame):
            print_rows(console, session.fetch(result), result.columns)
        else:
            session.flush()
    return 0


def _send_requests(console: Console, warehouse: str, text: str, not_owner: OwnershipError) -> int:
    from sparkwave.frontend.control import queue_requests, request_outcome
    from sparkwave.storage.warehouse import Warehouse

    path = Warehouse(warehouse).catalog_path
    queued = queue_requests(path, text, not_owner)
    deadline = time.time() + REQUEST_WAIT_S
    for request_id, what in queued:
        console.print(f"request {request_id} queued for the owner: {what}", highlight=False)
        while (outcome := request_outcome(path, request_id)) is None and time.time() < deadline:
            time.sleep(0.2)  # the owner applies requests at its next barrier
        if outcome is None:
            console.print(f"request {request_id} not applied yet: the owner applies it at its next barrier")
        elif outcome.startswith("error"):
            console.print(f"[bold red]request {request_id} failed:[/] {outcome}", highlight=False)
            return 1
        else:
            console.print(f"request {request_id} taken by the owner: {outcome}", highlight=False)
    return 0


def print_rows(console: Console, batches: Iterable[Sequence[Sequence[object]]], columns: list[str]) -> None:
    """A query's rows as they arrive, a batch at a time, aligned as psql aligns them (within each
    batch), then their count: a result of any size streams through in bounded memory."""
    out, n = console.file, 0
    for batch in batches:
        cells = [[_cell(v) for v in row] for row in batch]
        widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
        if n == 0:
            out.write(" " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + "\n")
            out.write("-" + "-+-".join("-" * w for w in widths) + "-\n")
        out.write("".join(" " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + "\n" for r in cells))
        out.flush()
        n += len(cells)
    if n == 0:
        out.write(" " + " | ".join(columns) + "\n")
    out.write(f"({n} row{'' if n == 1 else 's'})\n")
    out.flush()


def _cell(value: object) -> str:
    return "NULL" if value is None else str(value).replace("\n", "\\n")


def print_frame(console: Console, rows: list[dict], columns: list[str], title: str | None = None) -> None:
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*["NULL" if r[c] is None else str(r[c]) for c in columns])
    console.print(table)


def _jobs(console: Console, warehouse: str, watch: bool) -> int:
    from sparkwave.cli.inspect import jobs_table, watch_jobs

    if watch:
        return watch_jobs(console, warehouse)
    console.print(jobs_table(warehouse))
    return 0


if __name__ == "__main__":
    sys.exit(main())
