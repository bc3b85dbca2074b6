"""The oracle: expected table contents under sparkwave's DML semantics, and MV contents evaluated
from scratch by DuckDB on them, compared as exact multisets of rows.

DuckDB is made to follow PostgreSQL's semantics where they differ: `/` between two integers
truncates toward zero. Where sparkwave departs from PostgreSQL by design, so does the oracle: a
division by zero is NULL (not an error), and a decimal `sum` that does not fit decimal(38, s) is
NULL (PostgreSQL's numeric has no such bound)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import duckdb
import sqlglot
from sqlglot import exp


def norm(v):
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9)
    if isinstance(v, Decimal):
        return v.normalize()
    return v


def multiset(rows) -> Counter:
    return Counter(tuple(norm(v) for v in r) for r in rows)


def rows_of(df) -> list[tuple]:
    t = df.toArrow()
    cols = [t.column(i).to_pylist() for i in range(t.num_columns)]
    return list(zip(*cols, strict=True)) if cols else []


@dataclass
class TableModel:
    name: str
    ddl: str  # DuckDB column list
    columns: list[str]
    key: list[str]  # empty = append-only
    on_conflict: str = "overwrite"  # what an INSERT of a key the table holds does: | ignore | update_if_not_null


class Model:
    """Tables as DuckDB tables; each epoch's statements are evaluated against the committed state
    and applied in order (the last write to a key wins), as sparkwave does."""

    def __init__(self) -> None:
        self.db = connect()
        self.tables: dict[str, TableModel] = {}
        self.views: list[tuple[str, str]] = []

    def table(self, name: str, ddl: str, columns: list[str], key: list[str], *, row_id: bool = False,
              on_conflict: str = "overwrite") -> None:
        """`row_id`: a table without a primary key that still takes UPDATE and DELETE; rows get a
        hidden identity, as sparkwave's `_row_id`."""
        if row_id:
            ddl, columns, key = ddl + ", _rid BIGINT", [*columns, "_rid"], ["_rid"]
        self.tables[name] = TableModel(name, ddl, columns, key, on_conflict)
        self.db.execute(f"CREATE TABLE {name} ({ddl})")
        self._next_rid = 0

    def _fresh(self, t: TableModel, row: tuple) -> tuple:
        if "_rid" not in t.columns or len(row) == len(t.columns):
            return row
        self._next_rid += 1
        return (*row, self._next_rid)

    def view(self, name: str, sql: str) -> None:
        self.views.append((name, sql))
        self.db.execute(f"CREATE VIEW {name} AS {duckdb_sql(sql, self.db)}")

    def apply_epoch(self, statements: list[tuple]) -> None:
        """statements: ('insert', table, rows) | ('update', table, {col: sql}, where_sql)
        | ('delete', table, where_sql)."""
        intents: dict[str, list[tuple[str, tuple]]] = {t: [] for t in self.tables}
        for st in statements:
            t = self.tables[st[1]]
            cols = ", ".join(t.columns)
            if st[0] == "insert":
                intents[t.name] += [("ins", self._fresh(t, tuple(r))) for r in st[2]]
            elif st[0] == "update":
                rows = self.db.execute(f"SELECT {', '.join(st[2].get(c, c) for c in t.columns)} FROM {t.name} "
                                       f"WHERE {st[3]}").fetchall()
                intents[t.name] += [("up", r) for r in rows]
            else:
                rows = self.db.execute(f"SELECT {cols} FROM {t.name} WHERE {st[2]}").fetchall()
                intents[t.name] += [("del", r) for r in rows]
        for name, its in intents.items():
            t = self.tables[name]
            if not its:
                continue
            current = self.db.execute(f"SELECT {', '.join(t.columns)} FROM {name}").fetchall()
            if not t.key:
                rows = current + [r for _, r in its]
            else:
                ki = [t.columns.index(k) for k in t.key]
                state = {tuple(r[i] for i in ki): r for r in current}
                for op, r in its:
                    k = tuple(r[i] for i in ki)
                    if op == "ins" and k in state and t.on_conflict == "ignore":
                        continue
                    if op == "ins" and k in state and t.on_conflict == "update_if_not_null":
                        state[k] = tuple(old if new is None else new for old, new in zip(state[k], r, strict=True))
                    elif op in ("ins", "up"):
                        state[k] = r
                    else:
                        state.pop(k, None)
                rows = list(state.values())
            self.db.execute(f"DELETE FROM {name}")
            if rows:
                marks = ", ".join("?" * len(t.columns))
                self.db.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)

    def rows(self, relation: str) -> list[tuple]:
        t = self.tables.get(relation)
        cols = ", ".join(c for c in t.columns if c != "_rid") if t else "*"
        return self.db.execute(f"SELECT {cols} FROM {relation}").fetchall()


_SECONDS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600}


def _seconds(node: exp.Expression) -> int:
    unit = node.args.get("unit")
    n, u = re.fullmatch(r"(\d+)\s*([a-z]*)", f"{node.this.name} {unit.name if unit else ''}".strip().lower()).groups()
    return int(n) * _SECONDS[u]


def _window(fn: exp.Anonymous, alias: str) -> exp.Expression:
    """RisingWave's TUMBLE / HOP as plain DuckDB: every row with its window(s) appended, aligned to
    the Unix epoch; a row without a time belongs to no window."""
    table, time = fn.expressions[0].name, fn.expressions[1].name
    if fn.name.lower() == "tumble":
        size, slide = _seconds(fn.expressions[2]), _seconds(fn.expressions[2])
    else:
        slide, size = _seconds(fn.expressions[2]), _seconds(fn.expressions[3])
    # A double's quotient: `/` between integers truncates toward zero here (`connect`), not down.
    start = f"(floor(epoch_us(_t.{time})::DOUBLE / {slide * 10**6})::BIGINT - _hop.k) * {slide * 10**6}"
    sql = (f"(SELECT _t.*, make_timestamp({start}) AS window_start, "
           f"make_timestamp({start} + {size * 10**6}) AS window_end "
           f"FROM {table} AS _t, range(0, {size // slide}) AS _hop(k) WHERE _t.{time} IS NOT NULL) AS {alias}")
    return sqlglot.parse_one(f"SELECT * FROM {sql}", read="duckdb").args["from_"].this


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with PostgreSQL's integer division and sparkwave's NULL for a zero divisor
    (PostgreSQL's NULL ordering comes from sqlglot, which writes it out where DuckDB's differs)."""
    db = duckdb.connect()
    db.execute("SET integer_division = true")
    db.execute("SET error_on_division_by_zero = false")
    return db


def duckdb_sql(sql: str, db: duckdb.DuckDBPyConnection) -> str:
    """An MV's SQL (RisingWave's dialect) for DuckDB over the relations of `db`, with its window table
    functions expanded and its decimal sums and averages exact (`_decimal_sum`)."""
    tree = sqlglot.parse_one(sql, read="postgres")
    for t in list(tree.find_all(exp.Table)):
        if isinstance(t.this, exp.Anonymous) and t.this.name.lower() in ("tumble", "hop"):
            t.replace(_window(t.this, t.alias or t.this.expressions[0].name))
    for call in list(tree.find_all(exp.Sum, exp.Avg)):
        scope = call.find_ancestor(exp.Select)
        if isinstance(call.this, exp.Distinct) or scope is None:
            continue
        probe = scope.copy()
        probe.set("expressions", [call.this.copy()])
        for clause in ("group", "having", "distinct", "order", "limit", "offset"):
            probe.set(clause, None)
        (_, arg_type, *_), = db.execute(f"DESCRIBE {probe.sql(dialect='duckdb')}").fetchall()
        m = re.fullmatch(r"DECIMAL\(\d+,(\d+)\)", arg_type)
        if m:
            text = _decimal_sum(call.this.sql(dialect="duckdb"), int(m.group(1)), isinstance(call, exp.Avg))
            call.replace(sqlglot.parse_one(text, read="duckdb"))
    return tree.sql(dialect="duckdb")


def _decimal_sum(arg: str, scale: int, avg: bool) -> str:
    """DuckDB's decimal sum adds in a 128-bit integer and fails when it overflows: here the unscaled
    values' quotients and remainders by 10^20 are added instead (exact), and the total is NULL
    unless it fits decimal(38, scale). An average is sparkwave's double from the same sums."""
    unscaled = f"CAST(replace(CAST(({arg}) AS VARCHAR), '.', '') AS HUGEINT)"
    e20 = "CAST(100000000000000000000 AS HUGEINT)"
    hi, lo = f"sum({unscaled} // {e20})", f"sum({unscaled} % {e20})"
    if avg:
        return f"(CAST({hi} AS DOUBLE) * 1e20 + CAST({lo} AS DOUBLE)) / 1e{scale} / count({arg})"
    total = f"({hi} * {e20} + {lo})"
    return (f"CASE WHEN abs({hi}) > 1100000000000000000 THEN NULL "  # |total| > 10^38: also past HUGEINT
            f"WHEN abs({total}) >= CAST('1{'0' * 38}' AS HUGEINT) THEN NULL "
            f"ELSE CAST({total} AS DECIMAL(38, 0)) * CAST('{Decimal(1).scaleb(-scale):f}' AS DECIMAL(38, {scale})) END")


def sql_literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bytes):
        return f"'\\x{v.hex()}'"  # PostgreSQL's bytea hex input
    return str(v)


def values_sql(rows) -> str:
    return ", ".join("(" + ", ".join(sql_literal(v) for v in r) + ")" for r in rows)


def to_sql(st: tuple) -> str:
    """The SQL of a model statement tuple (see `Model.apply_epoch`)."""
    if st[0] == "insert":
        return f"INSERT INTO {st[1]} VALUES {values_sql(st[2])}"
    if st[0] == "update":
        return f"UPDATE {st[1]} SET {', '.join(f'{c} = {e}' for c, e in st[2].items())} WHERE {st[3]}"
    return f"DELETE FROM {st[1]} WHERE {st[2]}"


def check_views(session, model: Model, epoch: int, names: list[str]) -> None:
    """Each MV of `names` as of `epoch` equals DuckDB's answer over the model's inputs."""
    for name in names:
        got = multiset(rows_of(session.table(name, as_of=epoch)))
        want = multiset(model.rows(name))
        assert got == want, f"MV {name} differs from DuckDB at epoch {epoch}: extra {got - want}, missing {want - got}"


def run_with_late_views(spark, warehouse, tables, mvs, epochs, late: int, strategy: str,
                        append_only: str | None = None, compact_at: int | None = None) -> None:
    """Half the MVs from the start, the others created before epoch `late` by `strategy`; each
    checked at every epoch, and again after a compaction following epoch `compact_at` (state then
    read from base files, whose row groups lookups prune). `append_only`, if created, must be an
    append-only MV."""
    import sparkwave

    model = Model()
    with sparkwave.connect(warehouse, spark=spark, barrier_interval_ms=3_600_000) as s:
        for ddl, name, duck, cols, key in tables:
            s.sql(ddl)
            model.table(name, duck, cols, key)
        created: list[str] = []

        def create(batch: list[tuple[str, str]], how: str) -> None:
            for name, sql in batch:
                s.sql(f"CREATE MATERIALIZED VIEW {name} WITH (backfill_strategy = '{how}') AS {sql}")
                model.view(name, sql)
                created.append(name)

        create(mvs[::2], "snapshot")
        for i, batch in enumerate(epochs):
            if i == late:
                create(mvs[1::2], strategy)
                check_views(s, model, s.committed_epoch, created)
            for statement in batch:
                s.sql(to_sql(statement))
            model.apply_epoch(batch)
            check_views(s, model, epoch := s.flush(), created)
            if i == compact_at:
                s.compact()
                check_views(s, model, epoch, created)
        assert len(created) == len(mvs)
        if append_only in created:
            assert s.catalog.relation(append_only).schema.append_only
