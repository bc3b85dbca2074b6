"""DML: INSERT, UPDATE, DELETE and bulk inserts, evaluated against the latest committed state and
staged as a batch of intents for the next epoch.

A batch is a Parquet folder `| _op | _seq | columns |` under `staging/`, written before the
catalog records it, so a crash leaves at most an unreferenced folder. `_op` is +I (an INSERT, which
overwrites a key the table holds unless its ON CONFLICT says otherwise), +U (an UPDATE's new row) or
KEY_DELETE; `_seq` orders batches and the rows inside them, so the last write to a key wins.

A batch's `_seq` values (also the `_row_id` of rows it inserts into a table without a primary key)
come from a range reserved on a durable counter (`reserve_ids`): ranges never overlap and a later
batch's are larger. A batch on the driver reserves one id per row; one computed by Spark reserves
2^33 per partition (Spark's `monotonically_increasing_id`). The warehouse has 2^62 ids: about 10^18
driver-side rows, or 5 * 10^8 single-partition Spark batches."""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from sparkwave.core import policy, spark_features
from sparkwave.core.catalog import Relation
from sparkwave.core.chunk import Op, vnode
from sparkwave.core.errors import CatalogError, DataError, SqlError
from sparkwave.core.limits import MAX_VALUE_BYTES
from sparkwave.core.local_frames import local_frame, local_rows, to_arrow
from sparkwave.core.schema import Column
from sparkwave.frontend import returning, value_size
from sparkwave.frontend.plan import generated as generated_columns
from sparkwave.frontend.plan import proctime
from sparkwave.frontend.postgres import GROWING, bytea_from_text, bytea_from_text_sql, to_spark
from sparkwave.frontend.statements import Delete, Insert, Statement, Update
from sparkwave.meta.runtime import Runtime
from sparkwave.meta.settings import Settings
from sparkwave.storage.integrity import write_table
from sparkwave.storage.lookup import lookup

DML_SEQ_BASE = 1 << 62  # DML sorts after any source row of the same epoch (a source's `_seq` is its offset)
PARTITION_IDS = 1 << 33  # `monotonically_increasing_id()`: the partition's index << 33, plus the row's in it
OLD_BATCH_SHIFT = 42  # before `reserve_ids`, batch n's ids began at DML_SEQ_BASE + (n << 42)


@dataclass(frozen=True)
class Written:
    """What a DML statement staged: its row count and, with RETURNING, the rows it returns
    (`returning.py`)."""

    count: int
    rows: DataFrame | None = None


def _staged(rt: Runtime, stmt: Statement, rel: Relation, df: DataFrame, op: Op) -> Written:
    """`df`'s rows staged as intents `op`; with RETURNING, collected first and returned as staged."""
    check_generated(rel, df, op)
    if returning.returning_list(stmt) is None:
        return Written(stage(rt, rel, df, op))
    rows = _stage_arrow_rows(rt, rel, returning.staged_rows(df, rel), op)
    return Written(rows.num_rows, returning.returned(rt, stmt, rel, rows))


def reserve_ids(rt: Runtime, batch: int, space: int) -> int:
    """The first of `space` fresh `_seq` ids for `batch` (see the module docstring). The counter of a
    warehouse that staged batches before it existed starts past their ids (batches below `batch`)."""
    first = rt.catalog.next_counter("dml_ids", space, start=batch << OLD_BATCH_SHIFT)
    if first + space > DML_SEQ_BASE:
        raise DataError(f"this warehouse has used its {DML_SEQ_BASE:,} DML row ids; copy its tables into a new "
                        "warehouse")
    return DML_SEQ_BASE + first


def _cast_sql(column: Column, spark_type: str) -> str:
    """A value into the column's type, NULL if it does not fit; text into bytea read as PostgreSQL does."""
    if column.type.name == "bytea" and spark_type == "string":
        return bytea_from_text_sql(f"`{column.name}`")
    return f"try_cast(`{column.name}` AS {column.type.spark})"


def checked_cast(rt: Runtime, rel: Relation, df: DataFrame, what: str) -> DataFrame:
    """Cast `df`'s columns to the table's types; a value that does not fit raises DataError naming
    the column, the value and its row, as does a text or bytea value larger than `MAX_VALUE_BYTES`
    (found in the same job, and never brought to the driver). Built as SQL text: a Column per
    column costs several Py4J calls each, many seconds for a table of 1,000 columns."""
    cols = [c for c in rel.schema.columns if c.name in df.columns]
    types = dict(df.dtypes)
    keys = [k for k in rel.schema.key if (kc := rel.schema.column(k)) and not kc.hidden
            and k not in proctime.generated(rel.definition)]  # a generated key is computed by the table's step
    if absent := [k for k in keys if k not in types]:
        raise DataError(f"{what}: primary key column {absent[0]!r} of table {rel.name!r} cannot be NULL")
    cast = df.selectExpr(*[f"`{c.name}` AS raw_{i}" for i, c in enumerate(cols)],
                         *[f"{_cast_sql(c, types[c.name])} AS `{c.name}`" for c in cols])
    sized = [c.name for c in cols if c.type.name in value_size.SIZED]
    checks = [f"raw_{i} IS NOT NULL AND `{c.name}` IS NULL" for i, c in enumerate(cols)] + \
        [f"`{k}` IS NULL" for k in keys] + \
        [f"octet_length(`{name}`) > {MAX_VALUE_BYTES}" for name in sized]
    if checks:  # one flat call, not an OR per column: Spark's tree walks recurse on an expression's depth
        first = cast.where(f"array_contains(array({', '.join(f'({c})' for c in checks)}), true)").limit(1).selectExpr(
            *[f"{_shown(f'raw_{i}', types[c.name])} AS raw_{i}" for i, c in enumerate(cols)],
            *[f"`{c.name}` IS NULL AS null_{i}" for i, c in enumerate(cols)],
            *[f"octet_length(`{name}`) AS `size_{name}`" for name in sized]).collect()
        if first:
            row = first[0]
            for name in sized:
                if (row[f"size_{name}"] or 0) > MAX_VALUE_BYTES:
                    raise value_size.too_big(what, rel.name, name, row[f"size_{name}"])
            for i, c in enumerate(cols):
                if row[f"raw_{i}"] is not None and row[f"null_{i}"]:
                    raise DataError(f"{what}: value {row[f'raw_{i}']!r} does not fit column {c.name!r} of type "
                                    f"{c.type} in table {rel.name!r}")
            for i, c in enumerate(cols):
                if c.name in rel.schema.key and row[f"null_{i}"]:
                    raise DataError(f"{what}: primary key column {c.name!r} of table {rel.name!r} cannot be NULL")
    return cast.selectExpr(*[f"`{c.name}`" for c in cols])


def _shown(raw: str, spark_type: str) -> str:
    """A value as an error message quotes it: text cut to its first 100 characters."""
    if spark_type != "string":
        return raw
    return f"CASE WHEN length({raw}) > 100 THEN concat(substring({raw}, 1, 100), '...') ELSE {raw} END"


def stage(rt: Runtime, rel: Relation, df: DataFrame, op: Op) -> int:
    """Write a batch of intents and record it in the catalog; returns its row count. A small one
    that Spark's optimizer computed on the driver (an UPDATE or DELETE over a small table, which
    `_matching` reads there; an INSERT of computed VALUES; a bulk load of a small local frame) is
    staged from Arrow: no Spark job, no file commit protocol."""
    local = local_rows(df, pa.schema([pa.field(c.name, c.type.arrow) for c in rel.schema.columns
                                      if c.name in df.columns]))
    if local is not None:
        return _stage_arrow(rt, rel, local, op)
    batch = rt.catalog.next_counter("dml_batch", 1)
    df, partitions = spark_features.bounded_partitions(df)
    first = reserve_ids(rt, batch, partitions * PARTITION_IDS)
    seq = F.lit(first) + F.monotonically_increasing_id()
    if "_row_id" in rel.schema.key and "_row_id" not in df.columns:
        df = df.withColumn("_row_id", seq)
    present = set(df.columns)
    out = df.selectExpr(f"CAST({int(op)} AS tinyint) AS _op", f"{first} + monotonically_increasing_id() AS _seq",
                        *[f"CAST({f'`{c.name}`' if c.name in present else 'NULL'} AS {c.type.spark}) AS `{c.name}`"
                          for c in rel.schema.columns])
    path = rt.warehouse.staging_dir() / f"dml-{batch}"
    limit = Settings(rt.catalog).dml_rows_per_epoch
    out.write.mode("overwrite").option("maxRecordsPerFile", limit).parquet(str(path))
    rows, top = _rows_and_max_seq(path)
    if top >= first + partitions * PARTITION_IDS:
        rt.warehouse.remove_file(str(path))
        raise AssertionError(f"BUG: DML batch {batch} ran on more than the {partitions} partitions it reserved ids for")
    rt.catalog.stage_dml(rel.name, _split(rt, path, limit))
    return rows


def _split(rt: Runtime, path: Path, limit: int) -> list[tuple[str, int]]:
    """A statement's folder of files (each at most `limit` rows) as batches of at most `limit` rows
    each, in `_seq` order: an epoch takes whole batches up to `dml_rows_per_epoch` rows, so a huge
    statement spans epochs rather than making one epoch too big to run."""
    files = sorted(path.glob("*.parquet"))
    groups: list[list[tuple[Path, int]]] = [[]]
    for f in files:
        n = pq.ParquetFile(f).metadata.num_rows
        if groups[-1] and sum(m for _, m in groups[-1]) + n > limit:
            groups.append([])
        groups[-1].append((f, n))
    if len(groups) == 1:
        return [(str(path), sum(n for _, n in groups[0]))]
    out = []
    for i, group in enumerate(groups):
        part = path.with_name(f"{path.name}-{i:06d}")
        part.mkdir()
        for f, _ in group:
            os.replace(f, part / f.name)
        out.append((str(part), sum(n for _, n in group)))
    rt.warehouse.remove_tree(path)
    return out


def _rows_and_max_seq(path: Path) -> tuple[int, int]:
    """A staged batch's row count and largest `_seq`, from the Parquet footers."""
    rows, top = 0, -1
    for f in path.glob("*.parquet"):
        meta = pq.ParquetFile(f).metadata
        rows += meta.num_rows
        i = meta.schema.names.index("_seq")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(i).statistics
            top = max(top, stats.max if stats is not None and stats.has_min_max else 1 << 63)
    return rows, top


def target_table(rt: Runtime, stmt: Statement, table: exp.Expr | None) -> Relation:
    if not isinstance(table, exp.Table):
        raise stmt.error("expected a table name")
    if table.args.get("db") or table.args.get("catalog"):
        raise stmt.error(f"schema-qualified table names are not supported: {table.sql(dialect='postgres')}",
                         table.name)
    rel = rt.relation(table.name.lower())
    if rel.kind != "table":
        raise stmt.error(f"cannot modify {rel.name!r}: it is a materialized view; DML goes to tables")
    return rel


def insert_values(rt: Runtime, stmt: Insert) -> Written:
    ast = stmt.ast
    assert isinstance(ast, exp.Insert)
    target = ast.this
    columns_given = None
    if isinstance(target, exp.Schema):
        columns_given = [c.name.lower() for c in target.expressions]
        target = target.this
    rel = target_table(rt, stmt, target)
    if ast.args.get("conflict") is not None:
        raise stmt.error("INSERT ... ON CONFLICT is not supported: as in RisingWave, the rule belongs to the table "
                         "(CREATE TABLE ... ON CONFLICT DO NOTHING | DO UPDATE IF NOT NULL | OVERWRITE)", "ON CONFLICT")
    if ast.args.get("returning") is not None:
        returning.check_insert(stmt, rel)
    visible = [c.name for c in rel.schema.visible]
    generated = proctime.generated(rel.definition)
    proctime.refuse_written(stmt, "INSERT into", columns_given or [], generated, rel.definition)
    columns = columns_given or [c for c in visible if c not in generated]
    for c in columns:
        if c not in visible:
            raise CatalogError(f"unknown column {c!r} in INSERT INTO {rel.name} (columns: {', '.join(visible)}) "
                               f"(at {stmt.where(c)})", sqlstate="42703", at=stmt.at(c))
    values = ast.expression
    if not isinstance(values, exp.Values):
        raise stmt.error("only INSERT ... VALUES is supported; use Session.insert for bulk loads", "SELECT")
    tuples = []
    for n, tup in enumerate(values.expressions, 1):
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        if len(items) != len(columns):
            raise DataError(f"INSERT INTO {rel.name}: row {n} has {len(items)} values for {len(columns)} columns "
                            f"({', '.join(columns)})")
        for name, item in zip(columns, items, strict=True):
            if item.find(exp.Column):
                raise stmt.error(f"INSERT values must be constants, not {item.sql(dialect='postgres')!r}")
            target = rel.schema.column(name)
            assert target is not None
            value_size.check_literals(item, target, rel.name, f"INSERT INTO {rel.name} row {n}")
        tuples.append(items)
    literal = _literal_table(columns, tuples)
    if literal is not None:
        _check_insert_columns(rel, literal.column_names)
        value_size.check_arrow(literal, rel.name, f"insert into {rel.name}")
        if rel.definition.get("generated"):
            ddl = ", ".join(f"`{n}` {c.type.spark}" for n in literal.column_names if (c := rel.schema.column(n)))
            check_generated(rel, local_frame(rt.spark, literal, ddl), Op.INSERT)
        staged = _stage_arrow_rows(rt, rel, literal, Op.INSERT)
        return Written(staged.num_rows, returning.returned(rt, stmt, rel, staged)
                       if returning.returning_list(stmt) is not None else None)
    arrow_types = [c.type.arrow if (c := rel.schema.column(name)) is not None else pa.null() for name in columns]
    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in arrow_types]
    rows = [[to_spark(i, [], rt.spark) for i in items] for items in _unknown_columns_as_text(tuples, numeric)]
    names = ", ".join(f"`{c}`" for c in columns)
    # Spark evaluates an inline table (VALUES) as it analyses it, and refuses one whose values may
    # fail: rows with a call whose size is guarded (`postgres.size_guarded`) are selected instead
    grows = any(i.find(*GROWING) for items in tuples for i in items)
    query = (" UNION ALL ".join("SELECT " + ", ".join(f"{v} AS `{c}`" for v, c in zip(r, columns, strict=True))
                                for r in rows) if grows else
             f"SELECT * FROM VALUES {', '.join('(' + ', '.join(r) + ')' for r in rows)} AS v({names})")
    try:
        df = rt.spark.sql(query)
    except Exception as e:
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise DataError(f"INSERT INTO {rel.name}: {first[:300]}") from None
    return _staged(rt, stmt, rel, checked_cast(rt, rel, df, f"INSERT INTO {rel.name}"), Op.INSERT)


class _NotLiteral(Exception):
    pass


def _literal(node: exp.Expr) -> object:
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return Decimal(text) if any(ch in text for ch in ".eE") else int(text)
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if isinstance(value, int):
            return -value
        if isinstance(value, Decimal):
            return value.copy_negate()  # exact: `-value` rounds to the context's 28 digits
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        return node.this.this  # DATE '...', TIMESTAMP '...': pyarrow casts the text to the column's type
    raise _NotLiteral


def _unknown_as_text(values: list[object]) -> list[object]:
    """A column of numbers and quoted literals (`VALUES (10), ('5')`) as text: PostgreSQL gives a
    quoted literal no type until it meets the column's, so the cast to the column decides both."""
    if any(isinstance(v, str) for v in values) and any(isinstance(v, int | Decimal) and not isinstance(v, bool)
                                                      for v in values):
        return [v if v is None or isinstance(v, str) else str(v) for v in values]
    return values


def _unknown_columns_as_text(tuples: list[list[exp.Expr]], numeric: list[bool]) -> list[list[exp.Expr]]:
    """`_unknown_as_text` for VALUES that Spark evaluates (`VALUES (1.005 + 0), ('7.125')`): in a
    column of a numeric type (`numeric`, per column) that mixes quoted literals with other values,
    the others are cast to text, so that the cast to the column's type (`checked_cast`) reads every
    value, as PostgreSQL does (Spark refuses an inline table whose column mixes text and numbers).
    Numbers only: a number's text reads back as the same number, which is not so for every type."""
    def quoted(e: exp.Expr) -> bool:
        return isinstance(e, exp.Literal) and e.is_string

    def other(e: exp.Expr) -> bool:
        return not quoted(e) and not isinstance(e, exp.Null)

    mixed = {i for i in range(len(tuples[0]) if tuples else 0)
             if numeric[i] and any(quoted(t[i]) for t in tuples) and any(other(t[i]) for t in tuples)}
    return [[exp.cast(e.copy(), "text") if i in mixed and other(e) else e for i, e in enumerate(t)] for t in tuples]


def _literal_table(columns: list[str], tuples: list[list[exp.Expr]]) -> pa.Table | None:
    """VALUES made only of literals, as an Arrow table (None: let Spark evaluate them)."""
    try:
        cols = [_unknown_as_text([_literal(t[i]) for t in tuples]) for i in range(len(columns))]
        return pa.table({c: pa.array(v) for c, v in zip(columns, cols, strict=True)})
    except (_NotLiteral, pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        return None


def _check_insert_columns(rel: Relation, columns: list[str]) -> None:
    if rel.kind != "table":
        raise CatalogError(f"cannot insert into {rel.name!r}: it is a materialized view")
    visible = [c.name for c in rel.schema.visible]
    unknown = [c for c in columns if c not in visible]
    if unknown:
        raise CatalogError(f"insert into {rel.name!r}: unknown column(s) {', '.join(unknown)} "
                           f"(columns: {', '.join(visible)})", sqlstate="42703")
    if given := [c for c in columns if c in proctime.generated(rel.definition)]:
        raise CatalogError(f"insert into {rel.name!r}: column {given[0]!r} is "
                           f"{proctime.generated_as(rel.definition, given[0])}; leave it out")


def insert_frame(rt: Runtime, rel: Relation, df: DataFrame) -> int:
    _check_insert_columns(rel, df.columns)
    df = checked_cast(rt, rel, df, f"insert into {rel.name}")
    check_generated(rel, df, Op.INSERT)
    return stage(rt, rel, df, Op.INSERT)


def check_generated(rel: Relation, df: DataFrame, op: Op) -> None:
    """A generated column's expression that fails for a written row (`'abc' ~ p` with p = '(')
    fails the statement, as in PostgreSQL: staged, it would fail the table's step at every attempt
    of every epoch, and only a DROP of the table would let the pipeline go on. One Spark job, for
    tables with generated columns only; the value itself is computed by the table's step."""
    computed = rel.definition.get("generated")
    if not computed or op in (Op.DELETE, Op.KEY_DELETE, Op.UPDATE_DELETE):
        return
    present = set(df.columns)
    rows = df.selectExpr(*[f"CAST({f'`{c.name}`' if c.name in present else 'NULL'} AS {c.type.spark}) AS `{c.name}`"
                           for c in rel.schema.columns if c.name not in computed])
    for name, g in computed.items():  # one job each: the error names its column
        try:
            rows.select(F.max(F.xxhash64(F.expr(g["spark"])))).collect()
        except Exception as e:  # Spark's runtime error for the row (a bad pattern, an index of 0, ...)
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise DataError(f"{rel.name}: generated column {name!r} (AS {g['sql']}) fails for a row: {first[:300]}; "
                            "nothing was written") from None


def _cast(values: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """A safe cast (no silent truncation or overflow), plus the conversions SQL users expect:
    naive timestamp text into timestamptz is read as UTC (the session time zone), and integers
    into a narrow decimal are checked value by value rather than by the integer type's range."""
    if pa.types.is_binary(target) and (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        try:  # PostgreSQL's bytea input: hex (\\x...) or escape format
            return pa.chunked_array([pa.array([None if v is None else bytea_from_text(v) for v in values.to_pylist()],
                                              pa.binary())])
        except SqlError as e:
            raise pa.ArrowInvalid(str(e)) from None
    if pa.types.is_decimal(target) and pa.types.is_integer(values.type):
        values = values.cast(pa.decimal128(38, target.scale))
    try:
        return values.cast(target, safe=True)
    except pa.ArrowInvalid:
        if pa.types.is_timestamp(target) and target.tz and pa.types.is_string(values.type):
            return pc.assume_timezone(values.cast(pa.timestamp(target.unit)), target.tz)
        if pa.types.is_decimal(target) and (pa.types.is_decimal(values.type) or _is_text(values.type)):
            return _rounded(values, target)
        if _is_text(values.type):  # PostgreSQL's input functions skip surrounding spaces: ' 5' into an integer
            return pc.utf8_trim_whitespace(values).cast(target, safe=True)
        raise


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _rounded(values: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Numbers into numeric(p, s) as PostgreSQL's numeric input takes them: rounded to `s` digits,
    half away from zero (1.235 -> 1.24); a value with too many digits before the point is still an
    error."""
    if pa.types.is_decimal(values.type):  # one more digit first: 99.9995 rounds to 100.00, wider than 99.9995
        t = values.type
        wider = pa.decimal128(t.precision + 1, t.scale) if t.precision < 38 else pa.decimal256(
            min(t.precision + 1, 76), t.scale)
        return pc.round(values.cast(wider), ndigits=target.scale, round_mode="half_towards_infinity").cast(
            target, safe=True)
    step, wide = Decimal(1).scaleb(-target.scale), Context(prec=80)
    try:
        out = [None if v is None else Decimal(v.strip()).quantize(step, ROUND_HALF_UP, wide)
               for v in values.to_pylist()]
    except (InvalidOperation, ValueError):
        raise pa.ArrowInvalid(f"invalid input syntax for type numeric({target.precision}, {target.scale})") from None
    return pa.chunked_array([pa.array(out, target)])


def insert_arrow(rt: Runtime, rel: Relation, data: pa.Table) -> int:
    """A bulk load that is already on the driver: cast and staged with pyarrow, no Spark job."""
    _check_insert_columns(rel, data.column_names)
    value_size.check_arrow(data, rel.name, f"insert into {rel.name}")
    return _stage_arrow(rt, rel, data, Op.INSERT)


def _stage_arrow(rt: Runtime, rel: Relation, data: pa.Table, op: Op) -> int:
    """Stage rows that are on the driver (absent columns NULL), cast with pyarrow, as intents `op`."""
    return _stage_arrow_rows(rt, rel, data, op).num_rows


def _stage_arrow_rows(rt: Runtime, rel: Relation, data: pa.Table, op: Op) -> pa.Table:
    """`_stage_arrow`, returning the rows staged (`_op`, `_seq` and the table's columns)."""
    n = data.num_rows
    batch = rt.catalog.next_counter("dml_batch", 1)
    first = reserve_ids(rt, batch, max(1, n))
    seq = pa.array(range(first, first + n), pa.int64())
    cols: dict[str, pa.Array | pa.ChunkedArray] = {"_op": pa.array([int(op)] * n, pa.int8()), "_seq": seq}
    given = set(data.column_names)  # built anew on each access: a table of 1,000 columns took a second
    for c in rel.schema.columns:
        if c.name == "_row_id" and c.name not in given:
            cols[c.name] = seq
        elif c.name in given:
            try:
                cols[c.name] = _cast(data[c.name], c.type.arrow)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise DataError(f"insert into {rel.name}: a value does not fit column {c.name!r} of type {c.type}: "
                                f"{str(e).splitlines()[0][:200]}") from None
        else:
            cols[c.name] = pa.nulls(n, c.type.arrow)
        if c.name in rel.schema.key and cols[c.name].null_count and c.name not in proctime.generated(rel.definition):
            raise DataError(f"insert into {rel.name}: primary key column {c.name!r} cannot be NULL")
    limit = Settings(rt.catalog).dml_rows_per_epoch
    table = pa.table(cols)
    batches = []
    for i, lo in enumerate(range(0, max(1, n), limit)):
        path = rt.warehouse.staging_dir() / (f"dml-{batch}" if n <= limit else f"dml-{batch}-{i:06d}")
        path.mkdir(parents=True, exist_ok=True)
        write_table(table.slice(lo, limit), path / "part-0.parquet")
        batches.append((str(path), min(limit, n - lo)))
    rt.catalog.stage_dml(rel.name, batches)
    return table


def update(rt: Runtime, stmt: Update, epoch: int) -> Written:
    ast = stmt.ast
    assert isinstance(ast, exp.Update)
    rel = target_table(rt, stmt, ast.this)
    _refuse_append_only(stmt, rel, "UPDATE")
    assignments: dict[str, str] = {}
    for eq in ast.expressions:
        col = eq.this.name.lower()
        if (target := rel.schema.column(col)) is None or target.hidden:
            raise CatalogError(f"unknown column {col!r} in UPDATE {rel.name} (at {stmt.where(col)})",
                               sqlstate="42703", at=stmt.at(col))
        if col in rel.schema.key:
            raise stmt.error(f"cannot UPDATE primary key column {col!r}; DELETE and INSERT instead", col)
        proctime.refuse_written(stmt, "UPDATE", [col], proctime.generated(rel.definition), rel.definition)
        generated_columns.refuse_key_update(stmt, rel.definition, rel.schema.key, col)
        value = eq.expression
        value_size.check_literals(value, target, rel.name, f"UPDATE {rel.name}")
        if target.type.name == "bytea" and isinstance(value, exp.Literal) and value.is_string:
            value = exp.Cast(this=value, to=exp.DataType.build("BYTEA", dialect="postgres"))
        assignments[col] = to_spark(value, _typed(rel), rt.spark)
    df = _matching(rt, stmt, rel, ast, epoch)
    try:
        df = df.selectExpr(*[f"{assignments[c.name]} AS `{c.name}`" if c.name in assignments else f"`{c.name}`"
                             for c in rel.schema.columns])
    except Exception as e:
        raise SqlError(f"UPDATE {rel.name}: {str(e).splitlines()[0][:300]} (at {stmt.where()})") from None
    return _staged(rt, stmt, rel, checked_cast(rt, rel, df, f"UPDATE {rel.name}"), Op.UPDATE_INSERT)


def delete(rt: Runtime, stmt: Delete, epoch: int) -> Written:
    ast = stmt.ast
    assert isinstance(ast, exp.Delete)
    rel = target_table(rt, stmt, ast.this)
    _refuse_append_only(stmt, rel, "DELETE")
    keys = None if any(ast.args.get(a) for a in ("using", "returning")) else _key_literals(rel, ast)
    if keys is not None:  # by primary key: the rows of those keys, looked up on the driver, no scan
        column = rel.schema.column(keys.column_names[0])
        assert column is not None
        k = column.name
        # Spark computes the vnodes (its hash), from the keys typed exactly as the column.
        frame = local_frame(rt.spark, keys, f"`{k}` {column.type.spark}")
        keyed = to_arrow(frame.select(vnode([k]).alias("_vnode"), F.col(f"`{k}`")),
                         pa.schema([("_vnode", pa.int16()), (k, column.type.arrow)]))
        found = lookup(rt.catalog, rel.name, rel.schema, epoch, keyed)
        rt.check_retained(rel, epoch)  # the files read were those of `epoch`: retention did not remove any
        return Written(_stage_arrow(rt, rel, found, Op.KEY_DELETE))
    return _staged(rt, stmt, rel, _matching(rt, stmt, rel, ast, epoch), Op.KEY_DELETE)


def _key_literals(rel: Relation, ast: exp.Expr) -> pa.Table | None:
    """The keys of `WHERE k = <literal>` or `WHERE k IN (<literals>)` on a one-column primary key
    `k`, typed as the column; None for any other condition, and wherever the literal's type is not
    the column's own family (integer literals for an integer key, string literals for a text key),
    so that comparisons whose coercions Spark decides keep the scan's semantics."""
    where = ast.args.get("where")
    if where is None or len(rel.schema.key) != 1:
        return None
    cond, column = where.this, rel.schema.column(rel.schema.key[0])
    if isinstance(cond, exp.EQ):
        col, values = (cond.this, [cond.expression]) if isinstance(cond.this, exp.Column) else \
            (cond.expression, [cond.this])
    elif isinstance(cond, exp.In) and not any(cond.args.get(a) for a in ("query", "unnest", "field")):
        col, values = cond.this, cond.expressions
    else:
        return None
    target = ast.this
    names = {rel.name, target.alias_or_name.lower() if isinstance(target, exp.Expr) else rel.name}
    if (column is None or column.hidden or not isinstance(col, exp.Column) or col.name.lower() != column.name
            or (col.table and col.table.lower() not in names)):
        return None
    t = column.type.arrow
    if pa.types.is_integer(t):
        wanted = [v for v in values if isinstance(v, exp.Literal) and not v.is_string and v.this.isdigit()]
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        wanted = [v for v in values if isinstance(v, exp.Literal) and v.is_string]
    else:
        return None
    if len(wanted) != len(values):
        return None
    try:
        typed = _cast(pa.chunked_array([pa.array([_literal(v) for v in wanted])]), t)
    except (_NotLiteral, pa.ArrowException, ValueError):
        return None
    return pa.table({column.name: pc.unique(typed)})


def _typed(rel: Relation) -> list[tuple[str, str]]:
    """The table's columns as `to_spark` takes them: DML expressions read PostgreSQL's way too."""
    return [(c.name, c.type.name) for c in rel.schema.columns]


def _refuse_append_only(stmt: Statement, rel: Relation, what: str) -> None:
    if rel.schema.append_only:
        raise stmt.error(f"{what} is not allowed on append-only table {rel.name!r}", what)


def _matching(rt: Runtime, stmt: Update | Delete, rel: Relation, ast: exp.Expr, epoch: int) -> DataFrame:
    """The rows of `rel` as of `epoch` that the statement's WHERE holds for. A table of at most
    `policy.LOCAL_ROWS` rows (`policy.runs_locally`) is read on the driver, so that Spark's optimizer
    evaluates the statement there (on one thread: a bigger one is read by a Spark scan, whose executors evaluate it)."""
    df = rt.read(rel, epoch, max_rows=policy.LOCAL_ROWS).drop("_vnode")
    where = ast.args.get("where")
    if where is None:
        return df
    for col in where.find_all(exp.Column):
        c = rel.schema.column(col.name.lower())
        if c is None or c.hidden:
            raise CatalogError(f"unknown column {col.name!r} in WHERE of {stmt.tag} {rel.name} "
                               f"(at {stmt.where(col.name)})", sqlstate="42703", at=stmt.at(col.name))
    try:
        return df.where(to_spark(where.this, _typed(rel), rt.spark))
    except Exception as e:
        raise SqlError(f"{stmt.tag} {rel.name}: {str(e).splitlines()[0][:300]} (at {stmt.where()})") from None
