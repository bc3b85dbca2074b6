"""The `sparkwave` command: `sql`, `serve`, `jobs` and `demo`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkwave.core.errors import OwnershipError, SparkwaveError

REQUEST_WAIT_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkwave", description="A streaming database layer for Apache Spark.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_sql = sub.add_parser("sql", help="run SQL statements against a warehouse (through its server if one runs)")
    where = p_sql.add_mutually_exclusive_group(required=True)
    where.add_argument("--warehouse", help="the warehouse: its server's if `sparkwave serve` owns it, else embedded")
    where.add_argument("--url", help="a server's address, e.g. postgresql://127.0.0.1:4566/dev")
    src = p_sql.add_mutually_exclusive_group(required=True)
    src.add_argument("-e", dest="text", help="SQL text")
    src.add_argument("-f", dest="file", help="a file of SQL statements")
    p_serve = sub.add_parser("serve", help="own a warehouse and serve it over the PostgreSQL protocol")
    p_serve.add_argument("--warehouse", required=True)
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=4566)
    p_serve.add_argument("--http-port", type=int, default=5691, help="the dashboard, /metrics and /health (0: none)")
    p_serve.add_argument("--spark-master", default=None, help="default: $SPARKWAVE_SPARK_MASTER or local[*]")
    p_serve.add_argument("--spark-remote", default=None, metavar="sc://HOST:PORT",
                         help="a Spark Connect server to run on instead of a Spark of this process")
    p_serve.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    p_serve.add_argument("--password", default=None, help="enables SCRAM-SHA-256 (or $SPARKWAVE_PASSWORD)")
    p_serve.add_argument("--catalog", default=None, help="the catalog in PostgreSQL: postgresql://user@host/db (its "
                         "password from $PGPASSWORD or ~/.pgpass; never written). Default: the warehouse's own")
    p_serve.add_argument("--standby", action="store_true", help="with a PostgreSQL catalog: wait for the owner "
                         "to stop, then take the warehouse over")
    p_serve.add_argument("--barrier-interval-ms", type=int, default=1000, help=argparse.SUPPRESS)
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
            return _sql(console, args.warehouse, args.url,
                        args.text if args.text is not None else Path(args.file).read_text())
        if args.command == "serve":
            from sparkwave.cli.serve import ServeError, serve

            try:
                return serve(args)
            except ServeError as e:
                console.print(f"[bold red]error:[/] {e}", highlight=False)
                return 2
        if args.command == "jobs":
            return _jobs(console, args.warehouse, args.watch)
        try:
            from sparkwave.cli.demo import run_demo
        except ImportError as e:  # its broker and PostgreSQL come with the `dev` extra
            console.print(f"[bold red]error:[/] the demo needs sparkwave's dev extra (pip install 'sparkwave[dev]'): "
                          f"{e}", highlight=False)
            return 2
        return run_demo(console, args.warehouse, args.seconds)
    except SparkwaveError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130


def _sql(console: Console, warehouse: str | None, url: str | None, text: str) -> int:
    from sparkwave.cli.client import find_server, run_embedded, run_remote

    if url is None and warehouse is not None and (address := find_server(warehouse)) is not None:
        host, port = address
        url = f"postgresql://{host}:{port}/dev?user=sparkwave"
    if url is not None:
        return run_remote(url, text, sys.stdout, sys.stderr)
    assert warehouse is not None
    from sparkwave.core.errors import OwnershipError

    try:
        return run_embedded(warehouse, text, sys.stdout, sys.stderr)
    except OwnershipError as e:  # an owner that is no server: control statements still reach it, via the catalog
        return _send_requests(console, warehouse, text, e)


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
