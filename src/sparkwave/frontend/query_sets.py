"""Set-returning functions (`generate_series`, `unnest`) in ad-hoc queries, with PostgreSQL's
meaning. Spark's `explode(sequence(a, b))` is not PostgreSQL's generate_series (`(3, 1)` counts
down, a NULL argument fails, a step of 0 loops), so a call is never handed to Spark as it is: each
one whose arguments are constants (a FROM item, or the SELECT list of a SELECT without FROM) is
evaluated as the materialized views' `ProjectSet` does (`stream/project_set.py`): its arguments
translated and typed as PostgreSQL types them, its array guarded (empty where the step leads away
from the end or an argument is NULL, a step of 0 the error "step size cannot equal zero", more than
`MAX_SERIES_ROWS` elements an error), the calls of one SELECT list in lockstep (the longest decides,
a shorter one gives NULL). The rows become a view (of this query alone) that it reads in the call's
place. A call over a table's columns stays refused (`postgres.translated_tree` says where SRFs run).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from sparkwave.core import spark_features
from sparkwave.core.errors import SqlError
from sparkwave.stream.project_set import MAX_SERIES_ROWS

_INTEGERS = {"tinyint": 0, "smallint": 1, "int": 2, "bigint": 3}
_TIMES = ("timestamp", "timestamp_ntz")
_CALLS = (exp.GenerateSeries, exp.Unnest, exp.Explode)
Translate = Callable[[exp.Expr], str]  # a constant PostgreSQL expression in Spark SQL


@dataclass
class SetViews:
    """The views a query's set-returning calls became: names the query reads, each a frame
    (`spark_features.sql_over` binds them to the query alone)."""

    spark: SparkSession
    translate: Translate
    names: list[str]
    held: list[str] = field(default_factory=list)  # the next view's series arguments, in Spark SQL
    frames: dict[str, DataFrame] = field(default_factory=dict)

    def hold(self, sql: list[str]) -> list[str]:
        """Series arguments as columns of a one-row relation of their values: as literals, Spark's
        optimizer would fold `sequence(1, 2000000000)` on its own, before the guard around it."""
        self.held += sql
        return [f"`_h{i}`" for i in range(len(self.held) - len(sql), len(self.held))]

    def types(self, sql: list[str]) -> list[str]:
        """Spark's types of constant Spark SQL expressions (`int`, `timestamp`, `string`, ...)."""
        return [t for _, t in self.spark.sql("SELECT " + ", ".join(f"{x} AS `_t{i}`" for i, x in enumerate(sql)))
                .dtypes]

    def add(self, arrays: list[str], names: list[str], ordinality: bool) -> str:
        """A view of the arrays' rows in lockstep (as `ProjectSet.explode`): the longest decides."""
        source, reads = "", {}
        if self.held:
            values = self.spark.sql("SELECT " + ", ".join(f"{x} AS `_h{i}`" for i, x in enumerate(self.held)))
            held = f"sparkwave_sets_{uuid.uuid4().hex}"
            reads[held] = self.spark.createDataFrame(values.collect(), values.schema)
            source, self.held = f" FROM {held}", []
        count = ", ".join(f"coalesce(size(`_a{i}`), 0)" for i in range(len(arrays)))
        cols = [f"try_element_at(`_a{i}`, _p + 1) AS `{n}`" for i, n in enumerate(names[:len(arrays)])]
        if ordinality:
            cols.append(f"CAST(_p + 1 AS bigint) AS `{names[-1]}`")
        inner = ", ".join(f"{a} AS `_a{i}`" for i, a in enumerate(arrays))
        name = f"sparkwave_sets_{uuid.uuid4().hex}"
        self.frames[name] = spark_features.sql_over(
            self.spark, f"SELECT {', '.join(cols)} FROM (SELECT {inner}{source}) "
                        f"LATERAL VIEW posexplode(array_repeat(0, greatest(0, {count}))) _x AS _p, _z", reads)
        self.names.append(name)
        return name


def rewrite(ast: exp.Expr, views: SetViews, error: Callable[[str], SqlError]) -> None:
    """Replace, in `ast`, each set-returning FROM item and each SELECT list of calls without FROM
    whose arguments are constants by a view of its rows (`views`)."""
    for q in reversed(list(ast.find_all(exp.Select))):  # innermost first: a subquery's calls are its own
        from_ = q.args.get("from_")
        items = [from_.this] if from_ is not None else []
        items += [j.this for j in q.args.get("joins") or []]
        for item in items:
            if _is_set_item(item) and item.find(exp.Column) is None:
                _from_item(item, views, error)
        if from_ is None and _own(q, _CALLS):
            _select_list(q, views, error)


def _is_set_item(t: exp.Expr) -> bool:
    return isinstance(t, exp.Unnest) or (isinstance(t, exp.Table) and isinstance(t.this, exp.GenerateSeries))


def _from_item(t: exp.Expr, views: SetViews, error: Callable[[str], SqlError]) -> None:
    alias, ordinality = t.args.get("alias"), bool(t.args.get("ordinality"))
    if isinstance(t, exp.Table):
        calls: list[exp.Expr] = [t.this]
    else:
        calls = [exp.Explode(this=a.copy()) for a in t.expressions]  # unnest(a, b): zipped, one call each
        if offset := t.args.get("offset"):  # WITH ORDINALITY: True, or its column's name from the alias list
            ordinality = True
            if isinstance(offset, exp.Identifier) and isinstance(alias, exp.TableAlias):
                alias = alias.copy()
                alias.append("columns", offset.copy())
    listed = [c.name.lower() for c in alias.columns] if isinstance(alias, exp.TableAlias) and alias.columns else []
    want = len(calls) + int(ordinality)
    if len(listed) > want:
        raise error(f"the set-returning FROM item has {want} columns available but {len(listed)} columns specified")
    if not listed and isinstance(alias, exp.TableAlias) and alias.name and len(calls) == 1:
        listed = [alias.name.lower()]
    names = (listed + [_name(c) for c in calls[len(listed):]] + ["ordinality"])[:want]
    view = views.add([_array(c, views, error) for c in calls], names, ordinality)
    table = exp.Table(this=exp.to_identifier(view),
                      alias=exp.TableAlias(this=exp.to_identifier(alias.name if alias is not None and alias.name
                                                                  else names[0])))
    t.replace(table)


def _select_list(q: exp.Select, views: SetViews, error: Callable[[str], SqlError]) -> None:
    """`SELECT generate_series(1, 3) * 2, unnest(ARRAY[...])`: the calls' rows in lockstep as a
    view, the SELECT list over its columns."""
    if q.args.get("group") or q.args.get("distinct") or _own(q, (exp.AggFunc, exp.Window)):
        raise error("set-returning functions with GROUP BY, DISTINCT, aggregates or window functions in the same "
                    "SELECT are not supported; call them in a subquery (FROM generate_series(...) AS g(v))")
    calls = _own(q, _CALLS)
    if any(c.find(*_CALLS) is not c or c.find(exp.Select) for c in calls):
        raise error("nested set-returning calls are not supported")
    for c in calls:  # PostgreSQL refuses them where they would run whether the branch is taken or not
        cond = c.find_ancestor(exp.Case, exp.If, exp.Coalesce)
        if cond is not None and cond.find_ancestor(exp.Select) is q:
            where = "COALESCE" if isinstance(cond, exp.Coalesce) else "CASE"
            raise error(f"set-returning functions are not allowed in {where}; call them in a subquery "
                        "(FROM generate_series(...) AS g(v))")
    arrays = [_array(c, views, error) for c in calls]
    columns = [f"_sw{i}" for i in range(len(calls))]
    view = views.add(arrays, columns, False)
    for call, col in zip(calls, columns, strict=True):
        item = next(e for e in q.expressions if call is e or any(call is n for n in e.find_all(*_CALLS)))
        if item is call:  # a bare call is named after its function, as PostgreSQL names it
            call.replace(exp.alias_(exp.column(col), _name(call)))
            continue
        if not isinstance(item, exp.Alias):  # named as PostgreSQL names it; the same node, so `calls` stay in it
            named = exp.Alias(alias=exp.to_identifier(_column_name(item), quoted=True))
            item.replace(named)
            named.set("this", item)
        call.replace(exp.column(col))
    q.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(view))))


def _own(q: exp.Select, kinds: tuple[type[exp.Expr], ...]) -> list[exp.Expr]:
    """The nodes of `kinds` in `q`'s SELECT list that are not inside a subquery of it."""
    return [n for e in q.expressions for n in e.find_all(*kinds) if n.find_ancestor(exp.Select) is q]


def _column_name(e: exp.Expr) -> str:
    """PostgreSQL's name of an unnamed SELECT-list item (its FigureColname): a function call's name
    (through a cast: `generate_series(1, 2)::text`), else `?column?`."""
    e = e.unnest()
    while isinstance(e, exp.Cast):
        e = e.this.unnest()
    if isinstance(e, _CALLS):
        return _name(e)
    if isinstance(e, exp.Anonymous):
        return e.name.lower()
    if isinstance(e, exp.Func) and not isinstance(e, exp.Cast | exp.Binary | exp.Unary | exp.Case):
        return e.sql_name().lower()
    return "?column?"


def _name(call: exp.Expr) -> str:
    return "generate_series" if isinstance(call, exp.GenerateSeries) else "unnest"


def _array(call: exp.Expr, views: SetViews, error: Callable[[str], SqlError]) -> str:
    """A call's Spark array with PostgreSQL's meaning."""
    if not isinstance(call, exp.GenerateSeries):
        arrays = [call.this, *call.expressions] if isinstance(call, exp.Explode) else list(call.expressions)
        arr = arrays[0].unnest() if len(arrays) == 1 and isinstance(arrays[0], exp.Paren) else arrays[0]
        if len(arrays) != 1 or not isinstance(arr, exp.Array) or not arr.expressions:
            raise error(f"unnest() takes one array constructor, ARRAY[a, b, ...] (arrays are not a column type); got "
                        f"{call.sql(dialect='postgres')}")
        return views.translate(arr)
    if call.args.get("is_end_exclusive"):
        raise error("generate_series() with an exclusive end is not supported")
    return _series(call, views, error)


def _series(call: exp.GenerateSeries, views: SetViews, error: Callable[[str], SqlError]) -> str:
    parts = [call.args["start"], call.args["end"]]
    step = call.args.get("step")
    sql = [views.translate(x) for x in parts + ([step] if step is not None else [])]
    try:
        types = views.types(sql)
    except Exception as e:  # Spark's analyser refused an argument (INTERVAL '1' MONTH - INTERVAL '60' DAY)
        raise error(f"generate_series() arguments: {str(e).strip().splitlines()[0][:300]}") from None
    ends = [t for t in types[:2] if t not in ("string", "void")]  # text and NULL take the other's type
    if all(t in _INTEGERS or t == "void" for t in ends + types[2:]) and ends:
        ty = max(ends + [t for t in types[2:] if t != "void"], key=lambda t: _INTEGERS[t])
        a, b, s = (f"(CAST({x} AS {ty}))" for x in views.hold([*sql[:2], sql[2] if step is not None else "1"]))
        zero, grows = f"{s} = 0", f"{s} > 0"
        longer = f"abs(CAST({b} AS decimal(20)) - {a}) / abs(CAST({s} AS decimal(20))) >= {MAX_SERIES_ROWS}"
    elif step is not None and (ends or ["timestamp"])[0] in _TIMES and types[2].startswith("interval") \
            and all(t in _TIMES for t in ends):
        if "month" in types[2] or "year" in types[2]:
            raise error(f"generate_series() of timestamps with the step {step.sql(dialect='postgres')} is not "
                        "supported: the step must have a fixed length (weeks, days, hours, ...); write e.g. "
                        "INTERVAL '30 days'")
        naive = [x for x in parts if isinstance(x, exp.Cast) and x.to.is_type(exp.DataType.Type.TIMESTAMP)]
        if len(naive) != len(ends) or not ends:  # the query path reads `::timestamp` as Spark's (zoned) timestamp
            raise error("generate_series() of timestamptz is not supported in queries: its values would be in UTC, "
                        "not the session's TimeZone; give timestamp (without time zone) arguments, "
                        "generate_series('2024-01-01'::timestamp, '2024-01-02'::timestamp, INTERVAL '1 hour')")
        ty = "timestamp_ntz"
        a, b, s = (f"(CAST({x} AS {t}))" for x, t in zip(views.hold(sql), [ty, ty, types[2]], strict=True))
        zero, grows = f"{a} + {s} = {a}", f"{a} + {s} > {a}"
        longer = (f"abs(CAST(timestampdiff(MICROSECOND, {a}, {b}) AS decimal(20))) / "
                  f"abs(CAST(timestampdiff(MICROSECOND, {a}, {a} + {s}) AS decimal(20))) >= {MAX_SERIES_ROWS}")
    else:
        raise error(f"generate_series() of {', '.join(types)} is not supported: it takes integers (smallint, int, "
                    "bigint), or timestamps with an interval step; cast the arguments")
    moves = f"({a} = {b} OR ({a} < {b}) = ({grows}))"
    whens = [f"WHEN {zero} THEN raise_error('step size cannot equal zero')",
             f"WHEN {moves} AND {longer} THEN raise_error('generate_series() would make more than "
             f"{MAX_SERIES_ROWS} rows')"]
    return f"CASE {' '.join(whens)} WHEN {moves} THEN sequence({a}, {b}, {s}) END"
