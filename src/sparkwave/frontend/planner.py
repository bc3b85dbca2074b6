"""Planning `CREATE MATERIALIZED VIEW ... AS SELECT` into an operator tree (`stream/plan.py`): the one
planner of every MV, from a projection of one table to joins, aggregates, time windows and window
functions.

Accepted (after `rewrite.py` inlines CTEs, turns FILTER into CASE, ORDER BY ... LIMIT into a row
number, subqueries outside FROM into joins): `SELECT [DISTINCT] ... FROM item [, item |
[INNER|LEFT|RIGHT|FULL] JOIN item ON ...]* [WHERE ...] [GROUP BY ...] [HAVING ...]`, where an item
is a table or MV, `TUMBLE(t, time, size)`, `HOP(t, time, slide, size)` or a subquery of the same
form, and a non-aggregating SELECT list may hold window functions (`OVER (...)`). Joins need at
least one equality (or `IS NOT DISTINCT FROM`, which matches NULLs) between the two sides, unless
one side is a one-row aggregate. Other conditions in `ON` follow PostgreSQL: one on a side alone
filters that side before the join, or, on the preserved side of an outer join, only stops its rows
matching (they stay, NULL-padded); one on both sides (inner joins only) is evaluated after the join,
below any later join that could NULL-pad its columns. Predicates on one scanned relation are pushed
into its scan where no outer join can NULL-pad it.

Expressions keep PostgreSQL's semantics where Spark's differ (`frontend/postgres.py`): `/` between integers truncates
toward zero, and a decimal `sum` or `avg` accumulates exactly (see `_decimal_parts`).

The MV's key derives from its upstreams': the key of the tree's root (a scan's upstream key, a
join's two keys, an aggregate's group). A key column the query selects as it is becomes the MV's
key column under its output name; one it does not select is kept as a hidden column, named after
the column it comes from."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.utils import AnalysisException
from sqlglot import exp

from sparkwave.core.catalog import Relation
from sparkwave.core.errors import CatalogError, SqlError
from sparkwave.core.schema import RESERVED_COLUMNS, Column, Schema, SqlType, column_name_problem, from_spark
from sparkwave.core.spark import empty_frame
from sparkwave.frontend.common_subplans import share_common_subplans
from sparkwave.frontend.postgres import GROWING, spark_ddl, to_spark
from sparkwave.frontend.rewrite import output_name, rewrite
from sparkwave.frontend.shape import check_shape
from sparkwave.frontend.statements import Statement
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, JOINED_PREFIX, conjuncts
from sparkwave.stream.aggregate import Agg, Aggregate, sum_type
from sparkwave.stream.join import Join, JoinType
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import SIDE, OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan, Window
from sparkwave.stream.values import Values

_AGGS = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
_JOIN_TYPES: dict[str, JoinType] = {"": "inner", "INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}
# window functions whose value depends on the order of tied rows and not on a frame: the planner
# orders ties by row key (as in any explicit ROWS frame)
_ROW_ORDERED = (exp.RowNumber, exp.Lag, exp.Lead, exp.Ntile)
# ... and those whose default frame (RANGE ... CURRENT ROW: the current row's peers) that order would change
_FRAMED = (exp.FirstValue, exp.LastValue, exp.NthValue)
_UNIT_SECONDS = {"second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600,
                 "day": 86400, "days": 86400}


@dataclass
class MvPlan:
    root: Project
    schema: Schema
    outputs: list[tuple[str, str]]  # (MV column, internal column of the root), visible then hidden keys
    upstreams: list[str]


@dataclass
class _Item:
    """A FROM item in scope: its alias, node, and user-visible columns by name."""

    alias: str
    node: Operator
    cols: dict[str, str]  # column name -> internal name
    order: list[str] = field(default_factory=list)  # names in SELECT * order
    nullable: bool = False  # on the null-supplying side of an outer join
    # JOIN ... USING / NATURAL: columns that an unqualified name or `*` no longer means here (the
    # other side's stands for both), and, for a FULL join, the other side's internal name to
    # COALESCE this side's with
    merged: set[str] = field(default_factory=set)
    coalesce: dict[str, str] = field(default_factory=dict)
    pos: int = 0  # its place in FROM: `*` lists the items in that order


class Planner:
    def __init__(self, stmt: Statement, lookup: Callable[[str], Relation], spark: SparkSession) -> None:
        self.stmt = stmt
        self.lookup = lookup
        self.spark = spark
        self._ids = itertools.count(1)
        self._names = itertools.count(1)

    def err(self, message: str, keyword: str | None = None) -> SqlError:
        return self.stmt.error(message, keyword)

    def name(self, base: str) -> str:
        return f"c{next(self._names)}_{re.sub(r'[^a-z0-9_]', '_', base.lower())[:40]}"

    # --- entry ---------------------------------------------------------------------------------
    def plan(self, query: exp.Expr) -> MvPlan:
        if isinstance(query, exp.Values):  # a query that is only VALUES
            if query.args.get("limit") or query.args.get("offset"):
                raise self.err("LIMIT / OFFSET on VALUES is not supported in a materialized view; list only the "
                               "rows it should hold", "LIMIT" if query.args.get("limit") else "OFFSET")
            query = query.copy()
            query.set("order", None)  # an MV's rows have no order
            query = exp.select("*").from_(query)
        node, outputs = self.select(rewrite(query))
        visible = [(n, i) for n, i in outputs]
        if columns := self.stmt.args.get("columns"):  # CREATE MATERIALIZED VIEW mv (a, b, ...) AS
            if len(columns) > len(visible):
                raise self.err(f"materialized view column list names {len(columns)} columns, but its query has "
                               f"{len(visible)}", "AS")
            if reserved := sorted(set(columns) & RESERVED_COLUMNS):
                raise self.err(f"column name(s) {', '.join(reserved)} in the materialized view's column list are "
                               "reserved for sparkwave's own columns; choose another name", reserved[0])
            visible = [(columns[j] if j < len(columns) else n, i) for j, (n, i) in enumerate(visible)]
        names = [n for n, _ in visible]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise self.err(f"duplicate output column name(s) {', '.join(dupes)} in materialized view; add aliases")
        exprs = dict(node.exprs)
        direct: dict[str, str] = {}  # key column -> an output that is that column as it is
        for n, i in visible:
            if exprs.get(i, "").strip("`") in node.key and exprs[i].count("`") == 2:
                direct.setdefault(exprs[i].strip("`"), n)
        key: list[str] = []
        hidden: list[tuple[str, str]] = []
        taken = set(names)
        for k in node.key:
            if k in direct:
                key.append(direct[k])
            else:
                hname = _hidden_name(k, taken)
                taken.add(hname)
                hidden.append((hname, k))
                key.append(hname)
        types = dict(node.columns)
        cols = [Column(n, _sql_type(types[i])) for n, i in visible] + \
               [Column(n, _sql_type(types[i]), hidden=True) for n, i in hidden]
        ups = node.upstreams()
        # Scans and projections of append-only inputs only ever insert: the MV is append-only too.
        append_only = node.stateless and self.append_only(node)
        node.prune(set(node.names))  # scans read, and join sides store, only the columns the query uses
        share_common_subplans(node, self._ids)
        for op in node.walk():
            if isinstance(op, Join):
                op.borrow_states()  # a join side that is an aggregate's output reads the aggregate's state
                op.link_tables(self._linkable)  # a side that is a table's rows keeps them under its names
        return MvPlan(node, Schema(tuple(cols), tuple(key), append_only), visible + hidden, ups)

    # --- SELECT --------------------------------------------------------------------------------
    def select(self, q: exp.Expr) -> tuple[Project, list[tuple[str, str]]]:
        if not isinstance(q, exp.Select):
            raise self.err(f"unsupported query shape {type(q).__name__} in a materialized view; expected SELECT")
        check_shape(self.stmt, q)
        src = q.args.get("from_") or q.args.get("from")
        items = [self.from_item(src.this) if src is not None else self.values_item(None)]
        node: Operator = items[0].node
        where = conjuncts(q.args["where"].this) if q.args.get("where") else []
        all_inner = True
        after: list[exp.Expr] = []  # inner joins' conditions on both sides, not yet applied
        star: list[tuple[str, str]] | None = None  # `*` once a USING join merged columns: (name, Spark SQL)
        for j, right in self.join_order(q.args.get("joins") or [], items, where):
            side = (j.args.get("side") or "").upper()
            kind = (j.args.get("kind") or "").upper()
            jtype: JoinType
            natural = (j.args.get("method") or "").upper() == "NATURAL"
            using = [u.name.lower() for u in j.args.get("using") or []]
            if natural:  # the columns both sides have
                using = [c for c in right.order if any(c in it.cols and c not in it.merged for it in items)]
            if kind == "CROSS" or (not j.args.get("on") and not using and not natural):
                jtype, conds, from_where = "inner", [], True
            elif kind in ("", "INNER", "OUTER") and side in _JOIN_TYPES:
                jtype, from_where = _JOIN_TYPES[side], False
                conds = conjuncts(j.args["on"]) if j.args.get("on") else []
                if using or natural:
                    star = self._star_after_using(star, items, right, using, jtype)
                    conds = [self._using(c, items, right, jtype) for c in using]
            else:
                raise self.err(f"unsupported join {kind or side} in a materialized view", "JOIN")
            if from_where:  # implicit join: its equalities come from WHERE
                conds = [c for c in where if self._links(c, items, right)]
                where = [c for c in where if c not in conds]
            lk: list[str] = []
            rk: list[str] = []
            on_left: list[exp.Expr] = []
            on_right: list[exp.Expr] = []
            both: list[exp.Expr] = []
            key_cols: dict[str, exp.Column] = {}  # a key's internal name -> the column the user wrote
            null_safe: set[int] = set()  # positions of the keys paired by IS NOT DISTINCT FROM
            for c in conds:
                pair = self._key_pair(c, items, right)
                owners = self._owners(c, [*items, right])
                if pair:
                    (a, a_col), (b, b_col) = pair
                    # A column paired twice (`t1.x = t3.y AND t2.z = t3.y`) is one key and a
                    # condition on the other side (`t1.x = t2.z`): no key column appears twice.
                    same = type(c)  # `=` or IS NOT DISTINCT FROM
                    if b in rk:
                        if (partner := lk[rk.index(b)]) != a:
                            on_left.append(same(this=key_cols[partner].copy(), expression=a_col.copy()))
                    elif a in lk:
                        on_right.append(same(this=key_cols[rk[lk.index(a)]].copy(), expression=b_col.copy()))
                    else:
                        if same is exp.NullSafeEQ:
                            null_safe.add(len(lk))
                        lk.append(a)
                        rk.append(b)
                        key_cols[a], key_cols[b] = a_col, b_col
                elif owners and len(items) not in owners:
                    on_left.append(c)
                elif owners == {len(items)}:
                    on_right.append(c)
                else:
                    both.append(c)
            if not lk and (self._one_row(right.node) or self._one_row(node)):
                node, lk = self._constant_key(node)  # a scalar subquery's row meets every row
                right.node, rk = self._constant_key(right.node)
            if not lk:
                raise self.err("unsupported non-equi join: a join in a materialized view needs at least one "
                               "equality between columns of its two sides", "JOIN" if not from_where else "FROM")
            if jtype != "inner" and both:
                self.resolve(both[0], [*items, right], "ON")  # an unknown column is named as such
                raise self.err(f"unsupported condition {both[0].sql(dialect='postgres')} in the ON clause of an "
                               "outer join: besides equalities between the two sides, a condition there may "
                               "use the columns of one side only", "ON")
            widen: tuple[dict[int, str], dict[int, str]] = ({}, {})  # key position -> type, per side
            for i, (a, b) in enumerate(zip(lk, rk, strict=True)):
                ta, tb = node.type_of(a), right.node.type_of(b)
                if ta == tb:
                    continue
                common = self.common_numeric(ta, tb)
                if common is None:
                    raise self.err(f"join key types differ: {ta} and {tb}; cast one side in a subquery", "JOIN")
                for side, t in zip(widen, (ta, tb), strict=True):
                    if t != common:
                        side[i] = common
            if widen[0]:  # as PostgreSQL compares an int with a bigint: both as the wider type
                node, lk = self.cast_keys(node, lk, widen[0])
            if widen[1]:
                right.node, rk = self.cast_keys(right.node, rk, widen[1])
            if jtype in ("right", "full") and after:  # this join NULL-pads their columns: apply them first
                node, after = self.filter(node, after, items), []
            if null_safe:  # before on_side: a key it sets to NULL must then match nothing
                node, lk = self.null_safe_keys(node, lk, null_safe)
                right.node, rk = self.null_safe_keys(right.node, rk, null_safe)
            node, lk = self.on_side(node, on_left, items, lk, preserved=jtype in ("left", "full"))
            right_node, rk = self.on_side(right.node, on_right, [right], rk, preserved=jtype in ("right", "full"))
            if jtype != "inner":
                all_inner = False
            for it in items:
                it.nullable = it.nullable or jtype in ("right", "full")
            right.nullable = right.nullable or jtype in ("left", "full")
            node = Join(next(self._ids), node.columns + right_node.columns, node.key + right_node.key, left=node,
                        right=right_node, join_type=jtype, left_keys=lk, right_keys=rk)
            items.append(right)
            after += both
        where = after + where
        # Push single-scan predicates into their scans (only where no outer join can null them).
        rest = []
        for c in where:
            owner = self._single_item(c, items)
            if all_inner and owner is not None and isinstance(owner.node, Scan):
                _restrict(owner.node, self.resolve(c, items, "WHERE"))
            else:
                rest.append(c)
        predicate = " AND ".join(f"({self.resolve(c, items, 'WHERE')})" for c in rest) or None
        aggs = [a for e in q.expressions for a in _agg_calls(e)]
        having = q.args.get("having")
        if having is not None:
            aggs += _agg_calls(having.this)
        windowed = any(p.find(exp.Window) for p in q.expressions)
        if q.args.get("group") or aggs or having is not None or q.args.get("distinct"):
            if windowed:
                raise self.err("window functions (OVER ...) with SELECT DISTINCT * are not supported; name the "
                               "columns", "OVER")
            return self.aggregate(q, node, items, predicate)
        if windowed:  # after WHERE, before the SELECT list
            q, node = self.over(q, node, items, predicate)
            predicate = None
        outputs = self.outputs(q, items, star)
        exprs = [(i, sql) for _, i, sql in outputs]
        proj = self.project(node, exprs + [(k, f"`{k}`") for k in node.key], predicate, node.key)
        return proj, [(n, i) for n, i, _ in outputs]

    def outputs(self, q: exp.Select, items: list[_Item], star_list: list[tuple[str, str]] | None = None
                ) -> list[tuple[str, str, str]]:
        """(output name, internal name, Spark SQL) per SELECT item, stars expanded: `*` as
        `star_list` says after USING joins, else every item's columns in FROM order."""
        out: list[tuple[str, str, str]] = []
        for i, proj in enumerate(q.expressions):
            star = proj if isinstance(proj, exp.Star) else (
                proj.this if isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star) else None)
            if star is not None:
                qual = proj.table.lower() if isinstance(proj, exp.Column) and proj.table else None
                chosen = [it for it in items if (qual is None and not it.alias.startswith(JOINED_PREFIX))
                          or it.alias == qual]
                if not chosen:
                    raise self.err(f"unknown table {qual!r} in {proj.sql()}", qual)
                listed = star_list if qual is None and star_list is not None else [
                    (c, f"`{it.cols[c]}`") for it in sorted(chosen, key=lambda it: it.pos) for c in it.order
                    if not c.startswith(HIDDEN_PREFIX)]
                out += [(c, self.name(c), sql) for c, sql in listed]
                continue
            inner = proj.unalias() if isinstance(proj, exp.Alias) else proj
            name = output_name(proj, i)
            if problem := column_name_problem(name):
                raise self.err(f"output column name {name!r} {problem}; choose another alias", name)
            out.append((name, self.name(name), self.resolve(inner, items, f"SELECT item {i + 1}")))
        return out

    # --- FROM items ----------------------------------------------------------------------------
    def from_item(self, t: exp.Expr) -> _Item:
        if isinstance(t, exp.Subquery):
            node, outputs = self.select(t.this)
            alias = t.alias.lower() if t.alias else f"_subquery{node.id}"
            return _Item(alias, node, {n: i for n, i in outputs}, [n for n, _ in outputs])
        if isinstance(t, exp.Table) and isinstance(t.this, exp.Anonymous):
            return self.window_item(t)
        if isinstance(t, exp.Values):
            return self.values_item(t)
        if not isinstance(t, exp.Table) or t.args.get("db"):
            raise self.err(f"unsupported FROM item {t.sql(dialect='postgres')}; expected a table, an MV, TUMBLE, "
                           "HOP or a subquery", "FROM")
        rel = self.relation(t.name.lower())
        return self.scan(rel, (t.alias or rel.name).lower(), None)

    def values_item(self, t: exp.Values | None) -> _Item:
        """`VALUES (...), ...` as a FROM item (columns named by its alias list, else column1, ...,
        as in PostgreSQL), or, for a SELECT without FROM, one row of no columns."""
        tuples = [[]] if t is None else [list(r.expressions) if isinstance(r, exp.Tuple) else [r]
                                         for r in t.expressions]
        width = len(tuples[0])
        if any(len(r) != width for r in tuples):
            raise self.err(f"VALUES lists must all have the same length ({width} in the first)", "VALUES")
        alias = t.args.get("alias") if t is not None else None
        names = [c.name.lower() for c in alias.columns] if alias is not None and alias.columns else []
        if len(names) > width:
            raise self.err(f"VALUES has {width} columns available but {len(names)} columns specified", "VALUES")
        names += [f"column{i}" for i in range(len(names) + 1, width + 1)]
        for item in (i for r in tuples for i in r):
            if item.find(exp.Column, exp.Subquery, exp.Star, exp.AggFunc, exp.Window):
                raise self.err(f"VALUES items must be constants, not {item.sql(dialect='postgres')!r}", "VALUES")
            if grows := item.find(*GROWING):  # Spark's inline table refuses their size guard
                call = grows.sql(dialect="postgres").split("(")[0].lower()
                raise self.err(f"{call}() is not supported in the VALUES of a materialized view", "VALUES")
        internal = [self.name(n) for n in names]
        ordinal = self.name("_row_id")
        rows = [[to_spark(i, [], self.spark) for i in r] + [f"{n}L"] for n, r in enumerate(tuples)]
        inline = ", ".join("(" + ", ".join(r) + ")" for r in rows)
        try:
            fields = self.spark.sql(f"SELECT * FROM VALUES {inline} AS v({', '.join([*internal, ordinal])})"
                                    ).schema.fields
        except AnalysisException as e:
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise self.err(f"cannot evaluate VALUES: {_readable(msg)}", "VALUES") from None
        types = [from_spark(f.dataType) for f in fields]
        columns = [(n, ty.name) for n, ty in zip([*internal, ordinal], types, strict=True)]
        typed = [[f"CAST({v} AS {ty.spark})" for v, ty in zip(r, types, strict=True)] for r in rows]
        node = Values(next(self._ids), columns, [ordinal], rows=typed)
        name = alias.name.lower() if alias is not None and alias.name else f"_values{node.id}"
        return _Item(name, node, dict(zip(names, internal, strict=True)), names)

    def relation(self, name: str) -> Relation:
        return self.lookup(name)  # a creating one too: the session refuses it, naming its job

    def _linkable(self, name: str) -> bool:
        """Whether a relation's snapshot files are its rows: an append-only table or MV (a source
        stores nothing)."""
        rel = self.relation(name)
        return rel.kind != "source" and rel.schema.append_only

    def append_only(self, op: Operator) -> bool:
        """Whether `op`'s output only ever gains rows: scans of append-only tables, the projections
        (and windows) over them, and inner joins of two such inputs."""
        if isinstance(op, Scan):
            return self.relation(op.relation).schema.append_only
        if isinstance(op, Project):
            return self.append_only(op.input)
        if isinstance(op, Join):
            return op.join_type == "inner" and self.append_only(op.left) and self.append_only(op.right)
        return isinstance(op, Values)

    def scan(self, rel: Relation, alias: str, window: Window | None) -> _Item:
        exprs, cols, order, internal = [], {}, [], {}
        for c in rel.schema.columns:
            internal[c.name] = self.name(c.name)
            exprs.append((internal[c.name], f"`{c.name}`"))
            if not c.hidden:
                cols[c.name] = internal[c.name]
                order.append(c.name)
        columns = [(internal[c.name], c.type.name) for c in rel.schema.columns]
        key = [internal[k] for k in rel.schema.key]
        if window is not None:
            tcol = rel.schema.column(window.time)
            assert tcol is not None, "BUG: window_item checks the time column"
            ttype = tcol.type.name
            for w in ("window_start", "window_end"):
                if w in cols:
                    raise self.err(f"{rel.name!r} already has a column {w!r}; the window would hide it", w)
                internal[w] = self.name(w)
                exprs.append((internal[w], f"`{w}`"))
                cols[w] = internal[w]
                order.append(w)
                columns.append((internal[w], ttype))
            if window.kind == "hop":
                key.append(internal["window_start"])
        node = Scan(next(self._ids), columns, key, relation=rel.name, exprs=exprs, window=window)
        return _Item(alias, node, cols, order)

    def window_item(self, t: exp.Table) -> _Item:
        fn = t.this
        kind = fn.name.lower()
        args = fn.expressions
        if kind not in ("tumble", "hop"):
            raise self.err(f"unsupported table function {fn.name}; supported: TUMBLE, HOP", fn.name)
        want = 3 if kind == "tumble" else 4
        if len(args) != want:
            usage = "TUMBLE(table, time_col, size)" if kind == "tumble" else "HOP(table, time_col, slide, size)"
            raise self.err(f"{fn.name} takes {want} arguments: {usage}", fn.name)
        if not isinstance(args[0], exp.Column) or not isinstance(args[1], exp.Column):
            raise self.err(f"{fn.name}'s first two arguments are a table or MV name and a time column", fn.name)
        rel = self.relation(args[0].name.lower())
        time_col = args[1].name.lower()
        col = rel.schema.column(time_col)
        if col is None or col.hidden:
            raise CatalogError(f"unknown column {time_col!r} in {fn.name} of {rel.name!r} "
                               f"(at {self.stmt.where(time_col)})")
        if col.type.name not in ("timestamp", "timestamptz"):
            raise self.err(f"{fn.name}'s time column {time_col!r} is {col.type.name}; it needs a timestamp", time_col)
        if kind == "tumble":
            window = Window("tumble", time_col, self.interval(args[2], fn.name))
        else:
            slide, size = self.interval(args[2], fn.name), self.interval(args[3], fn.name)
            if size % slide:
                raise self.err(f"HOP's size ({size} s) must be a multiple of its slide ({slide} s)", fn.name)
            window = Window("hop", time_col, size, slide)
        return self.scan(rel, (t.alias or rel.name).lower(), window)

    def interval(self, node: exp.Expr, fn: str) -> int:
        text = None
        if isinstance(node, exp.Interval):
            unit = node.args.get("unit")
            text = f"{node.this.name} {unit.name if unit else ''}".strip()
        elif isinstance(node, exp.Literal) and node.is_string:
            text = node.name
        m = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", (text or "").lower())
        if not m or m.group(2) not in _UNIT_SECONDS or int(m.group(1)) <= 0:
            raise self.err(f"{fn} needs a positive interval of seconds, minutes, hours or days, "
                           f"got {node.sql(dialect='postgres')}", fn)
        return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]

    # --- names ---------------------------------------------------------------------------------
    def resolve(self, e: exp.Expr, items: list[_Item], where: str) -> str:
        """`e` in Spark SQL, with every column replaced by its internal name."""
        if e.find(exp.Subquery, exp.Exists):
            raise self.err(f"unsupported subquery in {where}; subqueries are supported in FROM", "SELECT")
        def swap(n: exp.Expr) -> exp.Expr:
            if not isinstance(n, exp.Column):
                return n
            if isinstance(n.this, exp.Star):
                raise self.err(f"* is not allowed in {where}")
            full = [it for it in items if not n.table and n.name.lower() in it.coalesce]
            if full:  # a FULL JOIN ... USING column: either side's
                name = n.name.lower()
                return exp.Coalesce(this=exp.column(full[0].cols[name], quoted=True),
                                    expressions=[exp.column(full[0].coalesce[name], quoted=True)])
            return exp.column(self.internal(n, items, where), quoted=True)

        return self.spark_sql(e.copy().transform(swap), [c for it in items for c in it.node.columns])

    def spark_sql(self, e: exp.Expr, columns: list[tuple[str, str]]) -> str:
        """`e`, over the internal `columns` (name, type), in Spark SQL with PostgreSQL's meaning."""
        return to_spark(e, columns, self.spark)

    def internal(self, col: exp.Column, items: list[_Item], where: str) -> str:
        name = col.name.lower()
        if col.table:
            q = col.table.lower()
            found = [it for it in items if it.alias == q]
            if not found:
                raise self.err(f"unknown table {col.table!r} in column {col.sql()!r} ({where}); in scope: "
                               f"{', '.join(it.alias for it in items)}", col.table)
            if name not in found[0].cols:
                raise CatalogError(f"unknown column {col.sql()!r} in {where} (columns of {q!r}: "
                                   f"{', '.join(found[0].order)}) (at {self.stmt.where(col.name)})")
            return found[0].cols[name]
        found = [it for it in items if name in it.cols and name not in it.merged]
        if found and name in found[0].coalesce:
            raise self.err(f"column {name!r} of a FULL JOIN ... USING cannot be used in {where}; write "
                           f"COALESCE({found[0].alias}.{name}, ...) or qualify it", col.name)
        if not found:
            known = ", ".join(f"{it.alias}.{c}" for it in items for c in it.order)
            raise CatalogError(f"unknown column {name!r} in {where} of materialized view (in scope: {known}) "
                               f"(at {self.stmt.where(col.name)})")
        if len(found) > 1:
            raise self.err(f"column {name!r} is ambiguous in {where}: it is in "
                           f"{', '.join(it.alias for it in found)}; qualify it", col.name)
        return found[0].cols[name]

    def join_order(self, joins: list[exp.Join], items: list[_Item], where: list[exp.Expr]
                   ) -> list[tuple[exp.Join, _Item]]:
        """The joins with their FROM items, in the order they are planned. A comma list (`FROM a, b,
        c WHERE ...`) is an inner join in any order, as PostgreSQL plans it: each next item is the
        first that an equality in WHERE links to those before (`a, b, c WHERE a.x = c.x AND
        b.y = c.y` joins c before b). From the first explicit JOIN on, the joins keep their order."""
        def implicit(j: exp.Join) -> bool:
            return (j.args.get("kind") or "").upper() in ("", "CROSS") and not j.args.get("side") \
                and not j.args.get("on") and not j.args.get("using") and not j.args.get("method")

        n = next((i for i, j in enumerate(joins) if not implicit(j)), len(joins))  # the leading comma list
        pending = [(j, self._positioned(self.from_item(j.this), pos)) for pos, j in enumerate(joins[:n], start=1)]
        ordered: list[tuple[exp.Join, _Item]] = []
        scope = list(items)
        while pending:
            pick = next((p for p in pending if any(self._links(c, scope, p[1]) for c in where)), pending[0])
            pending.remove(pick)
            ordered.append(pick)
            scope.append(pick[1])
        return ordered + [(j, self._positioned(self.from_item(j.this), pos))
                          for pos, j in enumerate(joins[n:], start=n + 1)]

    def _one_row(self, op: Operator) -> bool:
        """Whether `op` always has exactly one row: an aggregate without GROUP BY, renamed."""
        if isinstance(op, Aggregate):
            return op.scalar
        if isinstance(op, Values):
            return len(op.rows) == 1  # its key, the row's ordinal, is 0
        return isinstance(op, Project) and op.predicate is None and self._one_row(op.input)

    def _constant_key(self, op: Operator) -> tuple[Operator, list[str]]:
        """`op` and a join key column of one constant value: a one-row input's group column (its
        key, always 0), else a column 0 added."""
        if self._one_row(op):
            return op, [op.key[0]]
        const = self.name("one")
        return self.project(op, [*[(n, f"`{n}`") for n in op.names], (const, "0L")], None, op.key), [const]

    @staticmethod
    def _positioned(item: _Item, pos: int) -> _Item:
        item.pos = pos
        return item

    def _star_after_using(self, star: list[tuple[str, str]] | None, items: list[_Item], right: _Item,
                          using: list[str], jtype: str) -> list[tuple[str, str]]:
        """`*` after `JOIN right USING (using)`, as PostgreSQL lists it: the merged columns first,
        then the left side's others, then the right side's."""
        if star is None:
            star = [(c, f"`{it.cols[c]}`") for it in sorted(items, key=lambda it: it.pos) for c in it.order
                    if c not in it.merged and not c.startswith(HIDDEN_PREFIX)]
        first, lefts = [], set()
        for c in using:
            left = [it for it in items if c in it.cols and c not in it.merged]
            if len(left) != 1 or c not in right.cols:
                continue  # `_using` names the problem
            lsql, rsql = f"`{left[0].cols[c]}`", f"`{right.cols[c]}`"
            lefts.add(lsql)
            first.append((c, rsql if jtype == "right" else f"COALESCE({lsql}, {rsql})" if jtype == "full" else lsql))
        return first + [e for e in star if e[1] not in lefts] + \
            [(c, f"`{right.cols[c]}`") for c in right.order if c not in using]

    def _using(self, name: str, items: list[_Item], right: _Item, jtype: str) -> exp.Expr:
        """`JOIN right USING (name)`: the equality of `name` on both sides, and the two columns
        merged into one, as PostgreSQL: the left one's for an inner or left join, the right one's
        for a right join, their COALESCE for a full join."""
        left = [it for it in items if name in it.cols and name not in it.merged]
        if len(left) != 1 or name not in right.cols:
            where = "the left side" if len(left) != 1 else repr(right.alias)
            problem = "is ambiguous in" if len(left) > 1 else "is not a column of"
            raise self.err(f"column {name!r} named in USING {problem} {where}", name)
        if jtype == "right":
            left[0].merged.add(name)
        else:
            right.merged.add(name)
            if jtype == "full":
                left[0].coalesce[name] = right.cols[name]
        return exp.EQ(this=exp.column(name, table=left[0].alias), expression=exp.column(name, table=right.alias))

    def _owners(self, e: exp.Expr, items: list[_Item]) -> set[int]:
        out = set()
        for col in e.find_all(exp.Column):
            name = col.name.lower()
            for idx, it in enumerate(items):
                if (not col.table or col.table.lower() == it.alias) and name in it.cols:
                    out.add(idx)
        return out

    def _single_item(self, e: exp.Expr, items: list[_Item]) -> _Item | None:
        owners = self._owners(e, items)
        return items[owners.pop()] if len(owners) == 1 else None

    def _links(self, c: exp.Expr, left: list[_Item], right: _Item) -> bool:
        return self._key_pair(c, left, right) is not None

    def _key_pair(self, c: exp.Expr, left: list[_Item], right: _Item
                  ) -> tuple[tuple[str, exp.Column], tuple[str, exp.Column]] | None:
        """An equality between a column of the left items and one of `right`: each side's internal
        name and the column as written."""
        if not isinstance(c, exp.EQ | exp.NullSafeEQ) or not isinstance(c.this, exp.Column) \
                or not isinstance(c.expression, exp.Column):
            return None
        for a, b in ((c.this, c.expression), (c.expression, c.this)):
            if self._owners(a, left) and not self._owners(a, [right]) and self._owners(b, [right]) \
                    and not self._owners(b, left):
                return (self.internal(a, left, "ON"), a), (self.internal(b, [right], "ON"), b)
        return None

    # --- join conditions -----------------------------------------------------------------------
    def on_side(self, node: Operator, conds: list[exp.Expr], items: list[_Item], keys: list[str], *,
                preserved: bool) -> tuple[Operator, list[str]]:
        """A join side (and its join keys) under the ON clause's conditions on that side alone, as
        PostgreSQL: a row failing them matches nothing. On a side the join drops unmatched rows of,
        such rows are filtered out before it; on a preserved side they must stay, NULL-padded, so
        the first join key becomes NULL on them instead (a NULL key never matches)."""
        if not conds:
            return node, keys
        if not preserved:
            return self.filter(node, conds, items), keys
        pred = " AND ".join(f"({self.resolve(c, items, 'ON')})" for c in conds)
        gated = self.name("on_key")
        exprs = [*[(n, f"`{n}`") for n in node.names], (gated, f"CASE WHEN {pred} THEN `{keys[0]}` END")]
        return self.project(node, exprs, None, node.key), [gated, *keys[1:]]

    def common_numeric(self, a: str, b: str) -> str | None:
        """The type two numeric join keys are compared as (Spark's, as `COALESCE(a, b)`), None unless
        both are numeric."""
        if not (SqlType(a).is_numeric and SqlType(b).is_numeric):
            return None
        df = empty_frame(self.spark, spark_ddl([("a", a), ("b", b)]))
        return from_spark(df.selectExpr("coalesce(a, b) AS c").schema.fields[0].dataType).name

    def cast_keys(self, node: Operator, keys: list[str], casts: dict[int, str]) -> tuple[Operator, list[str]]:
        exprs = [(n, f"`{n}`") for n in node.names]
        out = list(keys)
        for i, t in casts.items():
            out[i] = self.name("key")
            exprs.append((out[i], f"CAST(`{keys[i]}` AS {SqlType(t).spark})"))
        return self.project(node, exprs, None, node.key), out

    def null_safe_keys(self, node: Operator, keys: list[str], null_safe: set[int]) -> tuple[Operator, list[str]]:
        """Join keys where NULL matches NULL (`IS NOT DISTINCT FROM`): each such key becomes two
        that are never NULL, whether it is NULL and its value with NULL replaced by a constant."""
        exprs = [(n, f"`{n}`") for n in node.names]
        out: list[str] = []
        for i, k in enumerate(keys):
            if i not in null_safe:
                out.append(k)
                continue
            flag, value = self.name("is_null"), self.name("not_null")
            exprs += [(value, f"COALESCE(`{k}`, {_zero(node.type_of(k))})"), (flag, f"`{k}` IS NULL")]
            out += [value, flag]
        return self.project(node, exprs, None, node.key), out

    def filter(self, node: Operator, conds: list[exp.Expr], items: list[_Item]) -> Operator:
        """`node`, whose columns include those of `items`, without its rows failing `conds`. A
        condition on one scanned relation that no outer join NULL-pads goes into its scan; the rest
        into a projection above `node`."""
        rest = []
        for c in conds:
            owner = self._single_item(c, items)
            if owner is not None and not owner.nullable and isinstance(owner.node, Scan):
                _restrict(owner.node, self.resolve(c, items, "ON"))
            else:
                rest.append(c)
        if not rest:
            return node
        pred = " AND ".join(f"({self.resolve(c, items, 'ON')})" for c in rest)
        return self.project(node, [(n, f"`{n}`") for n in node.names], pred, node.key)

    # --- window functions ----------------------------------------------------------------------
    def over(self, q: exp.Select, node: Operator, items: list[_Item], predicate: str | None
             ) -> tuple[exp.Select, Operator]:
        """The SELECT items of `q` with window functions as the calls of one `OverWindow` over
        `node`'s rows that pass `predicate`; returns `q` with each such item a column of a hidden FROM
        item (added to `items`) that names its output, and the new node."""
        if predicate:
            node = self.project(node, [(n, f"`{n}`") for n in node.names], predicate, node.key)
        q = q.copy()
        q.set("expressions", [p if isinstance(p, exp.Alias) or not p.find(exp.Window) else exp.alias_(
            p, output_name(p, i))  # PostgreSQL's name
            for i, p in enumerate(q.expressions)])
        alias = f"{JOINED_PREFIX}over{next(self._ids)}"
        hidden = _Item(alias, node, {f"{HIDDEN_PREFIX}side": SIDE}, [])
        for j, k in enumerate(node.key):
            hidden.cols[f"{HIDDEN_PREFIX}k{j}"] = k
        scope = [*items, hidden]
        calls: list[tuple[str, str]] = []
        partitions: list[list[str]] = []
        for j, item in enumerate(q.expressions):
            if not item.find(exp.Window):
                continue
            inner = item.unalias()
            e = inner.copy()
            for w in list(e.find_all(exp.Window)):
                if w.find_ancestor(exp.Window) or w.this.find(exp.Window):
                    raise self.err("a window function inside another's arguments is not supported", "OVER")
                if w.args.get("alias") or not isinstance(w.this, exp.Func):
                    raise self.err(f"unsupported window {w.sql(dialect='postgres')}: name the function and write "
                                   "its PARTITION BY / ORDER BY in OVER (...)", "OVER")
                parts = list(w.args.get("partition_by") or [])
                partitions.append([self.internal(p, items, "PARTITION BY") for p in parts
                                   if isinstance(p, exp.Column)])
                w.set("partition_by", [exp.column(f"{HIDDEN_PREFIX}side", table=alias), *parts])
                frame = w.args.get("spec")
                rows_frame = frame is not None and str(frame.args.get("kind", "")).upper() == "ROWS"
                if isinstance(w.this, _FRAMED) and not rows_frame:
                    raise self.err(f"{w.this.sql_name().lower()}() needs an explicit ROWS frame in a materialized view "
                                   "(e.g. ORDER BY ... ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING): "
                                   "among rows tied in the order, its value would be arbitrary", "OVER")
                if isinstance(w.this, _ROW_ORDERED) or rows_frame:
                    order = w.args.get("order") or exp.Order(expressions=[])
                    order.set("expressions", [*order.expressions, *[exp.Ordered(this=exp.column(
                        f"{HIDDEN_PREFIX}k{i}", table=alias), nulls_first=False) for i in range(len(node.key))]])
                    w.set("order", order)  # ties in the row key's order: deterministic, as the deltas need
            name = self.name(item.alias)
            calls.append((name, self.resolve(e, scope, f"SELECT item {j + 1}")))
            hidden.cols[f"{HIDDEN_PREFIX}w{j}"] = name
            inner.replace(exp.column(f"{HIDDEN_PREFIX}w{j}", table=alias))
        partition = [c for c in partitions[0] if all(c in p for p in partitions[1:])]
        if not partition:  # one partition: a constant column keys the state
            const = self.name("partition")
            node = self.project(node, [*[(n, f"`{n}`") for n in node.names], (const, "0L")], None, node.key)
            partition = [const]
        types = self.types(node, calls, None, extra=[(SIDE, "int")])
        over = OverWindow(next(self._ids), node.columns + [(n, types[n]) for n, _ in calls], list(node.key),
                          input=node, partition=partition, calls=calls)
        hidden.node = over
        items.append(hidden)
        return q, over

    # --- aggregation ---------------------------------------------------------------------------
    def aggregate(self, q: exp.Select, node: Operator, items: list[_Item], predicate: str | None
                  ) -> tuple[Project, list[tuple[str, str]]]:
        distinct = q.args.get("distinct")
        if distinct is not None and distinct.args.get("on"):
            raise self.err("unsupported DISTINCT ON in a materialized view: it needs a group top-n, which is not "
                           "supported", "DISTINCT ON")
        group_exprs: list[exp.Expr] = []
        if q.args.get("group"):
            for g in q.args["group"].expressions:
                if isinstance(g, exp.Literal) and not g.is_string:
                    idx = int(g.name) - 1
                    if not 0 <= idx < len(q.expressions):
                        raise self.err(f"GROUP BY position {g.name} is not in the select list", "GROUP BY")
                    sel = q.expressions[idx]
                    g = sel.unalias() if isinstance(sel, exp.Alias) else sel
                group_exprs.append(g)
        elif distinct is not None and q.args.get("having") is None and not any(map(_agg_calls, q.expressions)):
            for proj in q.expressions:  # no aggregates: the DISTINCT is the grouping
                if isinstance(proj, exp.Star) or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)):
                    raise self.err("SELECT DISTINCT * is not supported; name the columns", "DISTINCT")
                group_exprs.append(proj.unalias() if isinstance(proj, exp.Alias) else proj)
            distinct = None
        having = q.args.get("having")
        if any(e.find(exp.GroupConcat) for e in [*q.expressions, *([having.this] if having is not None else [])]):
            q, node = self.string_aggs(q, group_exprs, node, items, predicate)
            predicate = None
        pre: list[tuple[str, str]] = []
        group_of: dict[str, str] = {}  # resolved SQL -> group column
        group_cols: list[str] = []
        for g in group_exprs:
            sql = self.resolve(g, items, "GROUP BY")
            if sql in group_of:
                continue
            internal = self.name(g.name if isinstance(g, exp.Column) else "g")
            group_of[sql] = internal
            group_cols.append(internal)
            pre.append((internal, sql))
        scalar = not group_cols
        if scalar:
            gcol = self.name("_g")
            group_cols.append(gcol)
            pre.append((gcol, "0L"))
        aggs: list[Agg] = []
        by_call: dict[str, str] = {}
        arg_of: dict[str, str] = {}

        def column_of(sql: str) -> str:
            """The input column of the aggregate computing `sql`."""
            if sql not in arg_of:
                arg_of[sql] = self.name("arg")
                pre.append((arg_of[sql], sql))
            return arg_of[sql]

        def agg(fn: str, arg_col: str | None) -> str:
            ident = f"{fn}({arg_col})"
            if ident not in by_call:
                by_call[ident] = self.name(fn)
                aggs.append(Agg(fn, arg_col, by_call[ident], ""))
            return by_call[ident]

        def agg_for(call: exp.AggFunc) -> exp.Expr:
            fn = _AGGS.get(type(call))
            if isinstance(call, exp.ArrayAgg):
                raise self.err("array_agg is not supported: arrays are not a column type in sparkwave (left out on "
                               "purpose); string_agg(x::varchar, ',' ORDER BY ...) keeps the values as text",
                               call.sql_name())
            if fn is None:
                raise self.err(f"unsupported aggregate {call.sql(dialect='postgres')} in a materialized view; "
                               "supported: count, sum, avg, min, max, count(DISTINCT x), bool_and, bool_or, "
                               "string_agg", call.sql_name())
            if call.find(exp.Window):
                raise self.err("unsupported window function (OVER ...)", "OVER")
            arg = call.this
            if fn == "count" and isinstance(arg, exp.Star):
                return exp.column(agg("count_star", None), quoted=True)
            if isinstance(arg, exp.Distinct):
                if fn != "count" or len(arg.expressions) != 1:
                    raise self.err(f"unsupported aggregate {call.sql(dialect='postgres')}; DISTINCT is supported in "
                                   "count(DISTINCT x)", "DISTINCT")
                fn, arg = "count_distinct", arg.expressions[0]
            if arg.find(exp.AggFunc):
                raise self.err(f"nested aggregate in {call.sql(dialect='postgres')}", call.sql_name())
            sql = self.resolve(arg, items, "an aggregate's argument")
            scale = _decimal_scale(self.types(node, [("x", sql)], None)["x"]) if fn in ("sum", "avg") else None
            if scale is None:
                return exp.column(agg(fn, column_of(sql)), quoted=True)
            hi, lo = (column_of(part) for part in _decimal_parts(sql, scale))
            h, low = agg("sum", hi), agg("sum", lo)
            total = _decimal_sum(h, low, scale) if fn == "sum" else _decimal_avg(h, low, agg("count", hi), scale)
            return exp.paren(exp.var(total))

        def rewrite(e: exp.Expr, where: str) -> exp.Expr:
            if isinstance(e, exp.AggFunc):
                return agg_for(e)
            if not isinstance(e, (exp.Literal, exp.Star)) and not isinstance(e, exp.Interval):
                try:
                    sql = self.resolve(e, items, where)
                except (SqlError, CatalogError):
                    sql = None
                if sql is not None and sql in group_of:
                    return exp.column(group_of[sql], quoted=True)
            if isinstance(e, exp.Column):
                raise self.err(f"column {e.sql(dialect='postgres')} must appear in GROUP BY or be used in an "
                               f"aggregate ({where})", e.name)
            e = e.copy()
            for k, v in list(e.args.items()):
                if isinstance(v, exp.Expression):
                    e.set(k, rewrite(v, where))
                elif isinstance(v, list):
                    e.set(k, [rewrite(x, where) if isinstance(x, exp.Expression) else x for x in v])
            return e

        post: list[tuple[str, str, exp.Expr]] = []
        for i, proj in enumerate(q.expressions):
            inner = proj.unalias() if isinstance(proj, exp.Alias) else proj
            if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)):
                raise self.err("SELECT * is not allowed with GROUP BY; name the columns", "*")
            name = output_name(proj, i)
            if problem := column_name_problem(name):
                raise self.err(f"output column name {name!r} {problem}; choose another alias", name)
            post.append((name, self.name(name), rewrite(inner, f"SELECT item {i + 1}")))
        having = q.args.get("having")
        having_tree = rewrite(having.this, "HAVING") if having is not None else None
        pre_node = self.project(node, pre, predicate, [])
        for a in aggs:
            a.type = _agg_type(self, a, pre_node)
        gtypes = dict(pre_node.columns)
        agg_node = Aggregate(next(self._ids), [(g, gtypes[g]) for g in group_cols] + [(a.out, a.type) for a in aggs],
                             list(group_cols), input=pre_node, group=list(group_cols), aggs=aggs, scalar=scalar,
                             append_only=self.append_only(pre_node))
        exprs = [(i, self.spark_sql(t, agg_node.columns)) for _, i, t in post] + [(g, f"`{g}`") for g in group_cols]
        having_sql = self.spark_sql(having_tree, agg_node.columns) if having_tree is not None else None
        out = self.project(agg_node, exprs, having_sql, list(group_cols))
        outputs = [(n, i) for n, i, _ in post]
        if distinct is not None and not scalar:  # DISTINCT over groups (a scalar aggregate has one row)
            out = self.distinct(out, [i for _, i in outputs])
        return out, outputs

    def string_aggs(self, q: exp.Select, groups: list[exp.Expr], node: Operator, items: list[_Item],
                    predicate: str | None) -> tuple[exp.Select, Operator]:
        """`string_agg(x, sep [ORDER BY ...])`: each row of a group carries its group's string (window
        functions over the group, below the aggregate), and the aggregate takes its `max`. The string
        of a group is computed again whenever one of its rows changes."""
        q = q.copy()
        having = q.args.get("having")
        calls = [c for e in [*q.expressions, *([having.this] if having is not None else [])]
                 for c in e.find_all(exp.GroupConcat)]
        per_row = []
        for j, call in enumerate(calls):
            arg = call.this
            value, order = (arg.this, list(arg.expressions)) if isinstance(arg, exp.Order) else (arg, [])
            if isinstance(value, exp.Distinct):
                raise self.err("string_agg(DISTINCT ...) is not supported; take the distinct values in a subquery "
                               "first", "string_agg")
            sep = call.args.get("separator")
            if sep is None:
                raise self.err("string_agg takes a value and a delimiter: string_agg(x, ',')", "string_agg")

            def window(fn: exp.Func, value: exp.Expr = value, order: list[exp.Expr] = order) -> exp.Window:
                return exp.Window(this=fn, partition_by=[g.copy() for g in groups],
                                  order=exp.Order(expressions=[o.copy() for o in order]) if order else None,
                                  spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                                                      end="UNBOUNDED", end_side="FOLLOWING"))

            joined = exp.Anonymous(this="array_join", expressions=[
                window(exp.Anonymous(this="collect_list", expressions=[exp.cast(value.copy(), "text")])), sep.copy()])
            none = exp.EQ(this=window(exp.Count(this=value.copy())), expression=exp.Literal.number(0))
            per_row.append(exp.alias_(exp.Case(ifs=[exp.If(this=none, true=exp.Null())], default=joined),
                                      f"{HIDDEN_PREFIX}sa{j}"))
        evaluated, node = self.over(exp.select(*per_row), node, items, predicate)
        for call, e in zip(calls, evaluated.expressions, strict=True):
            call.replace(exp.Max(this=e.unalias().copy()))
        return q, node

    def distinct(self, node: Project, columns: list[str]) -> Project:
        """`SELECT DISTINCT` over an aggregate's rows: a second aggregate, grouped by every output."""
        types = dict(node.columns)
        agg = Aggregate(next(self._ids), [(c, types[c]) for c in columns], list(columns), input=node,
                        group=list(columns), aggs=[])
        return self.project(agg, [(c, f"`{c}`") for c in columns], None, list(columns))

    # --- projections ---------------------------------------------------------------------------
    def project(self, child: Operator, exprs: list[tuple[str, str]], predicate: str | None, key: list[str]
                ) -> Project:
        seen: set[str] = set()
        uniq = [(n, e) for n, e in exprs if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]
        types = self.types(child, uniq, predicate)
        return Project(next(self._ids), [(n, types[n]) for n, _ in uniq], list(key), input=child, exprs=uniq,
                       predicate=predicate)

    def types(self, child: Operator, exprs: list[tuple[str, str]], predicate: str | None,
              extra: list[tuple[str, str]] | None = None) -> dict[str, str]:
        try:
            df = empty_frame(self.spark, spark_ddl(child.columns + (extra or [])))
            if predicate:
                df = df.where(predicate)
            df = df.selectExpr(*[f"{e} AS `{n}`" for n, e in exprs])
            return {f.name: from_spark(f.dataType).name for f in df.schema.fields}
        except AnalysisException as e:
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise self.err(f"cannot evaluate the materialized view's query: {_readable(msg)}") from None


def _hidden_name(internal: str, taken: set[str]) -> str:
    """A hidden key column's name: the column it comes from (`c3_id` -> `id`), or `_pk_id`,
    `_pk_id_2`, ... if an output already has that name."""
    base = re.sub(r"^c\d+_", "", internal)
    candidates = itertools.chain([base, f"_pk_{base}"], (f"_pk_{base}_{i}" for i in itertools.count(2)))
    return next(name for name in candidates if name not in taken)


def _readable(msg: str) -> str:
    return re.sub(r"`?c\d+_([a-z0-9_]+)`?", r"\1", msg)


def _sql_type(name: str) -> SqlType:
    return SqlType(name)


def _zero(type_name: str) -> str:
    """A constant of the type, in Spark SQL."""
    t = SqlType(type_name)
    text = "0" if t.is_numeric else {"boolean": "false", "date": "'1970-01-01'", "timestamp": "'1970-01-01'",
                                     "timestamptz": "'1970-01-01'"}.get(t.name, "''")
    return f"CAST({text} AS {t.spark})"


def _restrict(scan: Scan, predicate: str) -> None:
    scan.predicate = predicate if scan.predicate is None else f"({scan.predicate}) AND ({predicate})"


def _agg_type(planner: Planner, a: Agg, child: Operator) -> str:
    if a.fn in ("count_star", "count", "count_distinct"):
        return "bigint"
    assert a.arg is not None
    t = _sql_type(child.type_of(a.arg))
    if a.fn in ("min", "max"):
        return t.name
    if not t.is_numeric:
        raise planner.err(f"{a.fn} needs a numeric argument, got {t.name}", a.fn)
    return "double" if a.fn == "avg" else sum_type(t.name)


def _decimal_scale(type_name: str) -> int | None:
    m = re.fullmatch(r"decimal\(\d+,(\d+)\)", type_name)
    return int(m.group(1)) if m else None


def _decimal_parts(arg: str, scale: int) -> tuple[str, str]:
    """The two parts a decimal `sum` / `avg` adds up per row, so that it is exact and the same both
    ways it is evaluated. Added as decimal(38, s), a sum is not: Spark's gives NULL once a partial
    sum leaves decimal(38, s), depending on the order of the rows, and Arrow's wraps around. So an
    argument `x` (`u` unscaled, |u| < 10^38) adds the quotient and remainder of `u` by 10^20 (`DIV`
    and `%` truncate: |q| < 10^18, |r| < 10^20) as integers, whose sums are exact in decimal(38, 0)
    for up to 10^18 rows, retractions included."""
    b = _pow10(20 - scale)  # 10^20 of x's last digit
    shift = f"{_pow10(scale)}" if scale < 38 else f"{_pow10(37)} * 10"  # 10^38 is no decimal(38) literal
    return (f"CAST(({arg}) DIV {b} AS DECIMAL(18,0))", f"CAST((({arg}) % {b}) * {shift} AS DECIMAL(20,0))")


def _decimal_sum(hi: str, lo: str, scale: int) -> str:
    """The sum from the sums `hi`, `lo` of `_decimal_parts`: decimal(38, scale), NULL if it does not fit
    (a value that cannot be stored is NULL, as everywhere in an MV). With the remainders' carry moved
    to the quotients (h, r: |r| < 10^20), h * 10^20 + r is computed as (h - sign h) * 10^20 +
    (r + sign h * 10^20), whose first term fits whenever the total does: an overflow (NULL through
    `try_`) means that the total does not fit. Spark cannot add two decimal(38, s) above scale 6
    without dropping a digit, so the unscaled total becomes the decimal through its text."""
    b = _pow10(20)
    h = f"(`{hi}` + (`{lo}` DIV {b}))"
    sign = f"(CASE WHEN {h} > 0 THEN 1 WHEN {h} < 0 THEN -1 ELSE 0 END)"
    unscaled = f"try_add(try_multiply({h} - {sign}, {b}), (`{lo}` % {b}) + {sign} * {b})"
    return f"CAST(CONCAT(CAST({unscaled} AS STRING), 'E-{scale}') AS DECIMAL(38,{scale}))"


def _decimal_avg(hi: str, lo: str, count: str, scale: int) -> str:
    """The average (double) from the sums of `_decimal_parts` and the count of values."""
    return f"(CAST(`{hi}` AS DOUBLE) * 1.0E20 + CAST(`{lo}` AS DOUBLE)) / 1.0E{scale} / `{count}`"


def _pow10(e: int) -> str:
    """10^e as an exact Spark decimal literal."""
    return ("1" + "0" * e if e >= 0 else "0." + "0" * (-e - 1) + "1") + "BD"


def _agg_calls(e: exp.Expr) -> list[exp.AggFunc]:
    """The aggregate calls of `e` (not those a window function computes over its partition)."""
    return [a for a in e.find_all(exp.AggFunc) if not a.find_ancestor(exp.Window)]
