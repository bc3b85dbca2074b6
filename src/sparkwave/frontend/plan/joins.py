"""FROM with joins: the items of a SELECT joined into one operator, left to right (a leading comma
list in the order PostgreSQL would join it), each join's ON / USING / NATURAL / WHERE conditions
split into its equi-join keys, conditions on one side alone, and conditions on both sides (applied
after the join, below any later join that could NULL-pad their columns)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from sparkwave.core.schema import SqlType
from sparkwave.frontend.plan.asof import EXAMPLE as ASOF_EXAMPLE
from sparkwave.frontend.plan.asof import asof_kind, one_time_type, take_inequality, timed_rows
from sparkwave.frontend.plan.context import PlanContext
from sparkwave.frontend.plan.intervals import interval_of, outer_cleaning, outer_ranges
from sparkwave.frontend.plan.scope import Item, Scope
from sparkwave.frontend.plan.sources import values_item
from sparkwave.frontend.plan.temporal_join import is_temporal, plan_temporal_join
from sparkwave.frontend.subqueries import HIDDEN_PREFIX, conjuncts
from sparkwave.stream.asof_join import AsofJoin
from sparkwave.stream.expressions import Expr
from sparkwave.stream.join import Join, JoinType
from sparkwave.stream.operator import Operator
from sparkwave.stream.scan import Scan

JOIN_TYPES: dict[str, JoinType] = {"": "inner", "INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}
MakeItem = Callable[[exp.Expr], Item]


@dataclass
class FromClause:
    """The FROM clause as planned so far: the joined node, its items, and the conditions left."""

    node: Operator
    items: list[Item]
    where: list[exp.Expr]
    after: list[exp.Expr] = field(default_factory=list)  # inner joins' conditions on both sides, not yet applied
    star: list[tuple[str, str]] | None = None  # `*` once a USING join merged columns: (name, Spark SQL)
    all_inner: bool = True


@dataclass
class _Conditions:
    """A join's conditions, split: key columns (internal names) paired left to right, and the rest."""

    lk: list[str] = field(default_factory=list)
    rk: list[str] = field(default_factory=list)
    on_left: list[exp.Expr] = field(default_factory=list)
    on_right: list[exp.Expr] = field(default_factory=list)
    both: list[exp.Expr] = field(default_factory=list)
    null_safe: set[int] = field(default_factory=set)  # positions of the keys paired by IS NOT DISTINCT FROM


def plan_from(ctx: PlanContext, q: exp.Select, make_item: MakeItem) -> FromClause:
    """The FROM clause and joins of `q`; `where` is left with the conditions no join took."""
    src = q.args.get("from_") or q.args.get("from")
    items = [make_item(src.this) if src is not None else values_item(ctx, None)]
    where = conjuncts(q.args["where"].this) if q.args.get("where") else []
    fc = FromClause(items[0].node, items, where)
    for j, right in join_order(ctx, q.args.get("joins") or [], items, where, make_item):
        join_one(ctx, fc, j, right)
    fc.where = fc.after + fc.where
    return fc


def _join_kind(ctx: PlanContext, fc: FromClause, j: exp.Join, right: Item
               ) -> tuple[JoinType, list[exp.Expr], bool]:
    """The join's type, its conditions, and whether they come from WHERE (an implicit join)."""
    side = (j.args.get("side") or "").upper()
    kind = (j.args.get("kind") or "").upper()
    method = (j.args.get("method") or "").upper()
    if method == "ASOF":
        return asof_kind(ctx, j), conjuncts(j.args["on"]), False
    if method not in ("", "NATURAL"):
        raise ctx.err(f"{method} JOIN is not supported", method)
    natural = method == "NATURAL"
    using = [u.name.lower() for u in j.args.get("using") or []]
    if natural:  # the columns both sides have
        using = [c for c in right.order if any(c in it.cols and c not in it.merged for it in fc.items)]
    if kind == "CROSS" or (not j.args.get("on") and not using and not natural):
        return "inner", [], True
    if kind in ("", "INNER", "OUTER") and side in JOIN_TYPES:
        jtype = JOIN_TYPES[side]
        conds = conjuncts(j.args["on"]) if j.args.get("on") else []
        if using or natural:
            fc.star = _star_after_using(fc.star, fc.items, right, using, jtype)
            conds = [_using(ctx, c, fc.items, right, jtype) for c in using]
        return jtype, conds, False
    raise ctx.err(f"unsupported join {kind or side} in a materialized view", "JOIN")


def join_one(ctx: PlanContext, fc: FromClause, j: exp.Join, right: Item) -> None:
    """`fc` joined with `right` by `j`."""
    if is_temporal(j):  # FOR SYSTEM_TIME AS OF PROCTIME(): `temporal_join.py`
        return plan_temporal_join(ctx, fc, j, right)
    jtype, conds, from_where = _join_kind(ctx, fc, j, right)
    items = fc.items
    if from_where:  # implicit join: its equalities come from WHERE
        left = Scope(ctx, items)
        conds = [c for c in fc.where if left.links(c, right)]
        fc.where = [c for c in fc.where if c not in conds]
    split = _split(ctx, items, right, conds)
    node = fc.node
    asof = take_inequality(ctx, items, right, split.both) if (j.args.get("method") or "").upper() == "ASOF" \
        else None
    if not split.lk and asof is None and (ctx.one_row(right.node) or ctx.one_row(node)):
        node, split.lk = _constant_key(ctx, node)  # a scalar subquery's row meets every row
        right.node, split.rk = _constant_key(ctx, right.node)
    if not split.lk:
        raise ctx.err("unsupported non-equi join: a join in a materialized view needs at least one "
                      "equality between columns of its two sides" + (f", as in {ASOF_EXAMPLE}" if asof else ""),
                      "JOIN" if not from_where else "FROM")
    ranged, ranges = list(split.both), None  # an outer join's range conditions in ON, between a time of each side
    if jtype != "inner" and split.both:
        Scope(ctx, [*items, right]).resolve(split.both[0], "ON")  # an unknown column is named as such
        ranges = outer_ranges(ctx, items, right, split.both, node, right.node) if asof is None else None
        if ranges is None:
            raise ctx.err(f"unsupported condition {split.both[0].sql(dialect='postgres')} in the ON clause of an "
                          "outer join: besides equalities between the two sides, a condition there may use the "
                          "columns of one side only, or bound a time of one side by a time of the other "
                          "(a.ts BETWEEN b.ts AND b.ts + INTERVAL '10' SECOND)", "ON")
        split.both = []  # the join applies them
    node = _widen_keys(ctx, node, right, split)
    if jtype in ("right", "full") and fc.after:  # this join NULL-pads their columns: apply them first
        node, fc.after = filter_rows(ctx, node, fc.after, items), []
    if split.null_safe:  # before on_side: a key it sets to NULL must then match nothing
        node, split.lk = null_safe_keys(ctx, node, split.lk, split.null_safe)
        right.node, split.rk = null_safe_keys(ctx, right.node, split.rk, split.null_safe)
    node, lk = on_side(ctx, node, split.on_left, items, split.lk, preserved=jtype in ("left", "full"))
    right_node, rk = on_side(ctx, right.node, split.on_right, [right], split.rk,
                             preserved=jtype in ("right", "full"))
    if asof is not None:
        node, right_node, asof = one_time_type(ctx, node, right_node, asof)
        node, lk = timed_rows(ctx, node, asof.left, lk, preserved=jtype == "left")
        right_node, rk = timed_rows(ctx, right_node, asof.right, rk, preserved=False)
    if jtype != "inner" or asof is not None:  # (a WHERE filter pushed into the right side would change the match)
        fc.all_inner = False
    for it in items:
        it.nullable = it.nullable or jtype in ("right", "full")
    right.nullable = right.nullable or jtype in ("left", "full")
    if asof is not None:
        fc.node = AsofJoin(ctx.next_id(), node.columns + right_node.columns,  # a left row has one output row
                           node.key or node.key + right_node.key, left=node,
                           right=right_node, join_type=jtype, left_keys=lk, right_keys=rk,
                           inequality=asof.inequality, left_time=asof.left, right_time=asof.right)
    else:
        fc.node = Join(ctx.next_id(), node.columns + right_node.columns, node.key + right_node.key, left=node,
                       right=right_node, join_type=jtype, left_keys=lk, right_keys=rk,
                       interval=interval_of(ctx, items, right, split.both + fc.where, node, right_node)
                       if jtype == "inner" and fc.all_inner else
                       outer_cleaning(interval_of(ctx, items, right, ranged, node, right_node), jtype)
                       if ranges else None,
                       ranges=ranges or [])
    items.append(right)
    fc.after += split.both


def _split(ctx: PlanContext, items: list[Item], right: Item, conds: list[exp.Expr]) -> _Conditions:
    """The join keys among `conds`, and where each other condition applies."""
    out = _Conditions()
    left, both = Scope(ctx, items), Scope(ctx, [*items, right])
    key_cols: dict[str, exp.Column] = {}  # a key's internal name -> the column the user wrote
    for c in conds:
        pair = left.key_pair(c, right)
        owners = both.owners(c)
        if pair:
            (a, a_col), (b, b_col) = pair
            # A column paired twice (`t1.x = t3.y AND t2.z = t3.y`) is one key and a
            # condition on the other side (`t1.x = t2.z`): no key column appears twice.
            same = type(c)  # `=` or IS NOT DISTINCT FROM
            if b in out.rk:
                if (partner := out.lk[out.rk.index(b)]) != a:
                    out.on_left.append(same(this=key_cols[partner].copy(), expression=a_col.copy()))
            elif a in out.lk:
                out.on_right.append(same(this=key_cols[out.rk[out.lk.index(a)]].copy(), expression=b_col.copy()))
            else:
                if same is exp.NullSafeEQ:
                    out.null_safe.add(len(out.lk))
                out.lk.append(a)
                out.rk.append(b)
                key_cols[a], key_cols[b] = a_col, b_col
        elif owners and len(items) not in owners:
            out.on_left.append(c)
        elif owners == {len(items)}:
            out.on_right.append(c)
        else:
            out.both.append(c)
    return out


def _widen_keys(ctx: PlanContext, node: Operator, right: Item, split: _Conditions) -> Operator:
    """Keys of two numeric types compared as the wider, as PostgreSQL compares an int with a bigint;
    returns the left node (the right item's node is replaced in place)."""
    widen: tuple[dict[int, str], dict[int, str]] = ({}, {})  # key position -> type, per side
    for i, (a, b) in enumerate(zip(split.lk, split.rk, strict=True)):
        ta, tb = node.type_of(a), right.node.type_of(b)
        if ta == tb:
            continue
        common = common_numeric(ctx, ta, tb)
        if common is None:
            raise ctx.err(f"join key types differ: {ta} and {tb}; cast one side in a subquery", "JOIN")
        for side, t in zip(widen, (ta, tb), strict=True):
            if t != common:
                side[i] = common
    if widen[0]:
        node, split.lk = cast_keys(ctx, node, split.lk, widen[0])
    if widen[1]:
        right.node, split.rk = cast_keys(ctx, right.node, split.rk, widen[1])
    return node


def join_order(ctx: PlanContext, joins: list[exp.Join], items: list[Item], where: list[exp.Expr],
               make_item: MakeItem) -> list[tuple[exp.Join, Item]]:
    """The joins with their FROM items, in the order they are planned. A comma list (`FROM a, b,
    c WHERE ...`) is an inner join in any order, as PostgreSQL plans it: each next item is the
    first that an equality in WHERE links to those before (`a, b, c WHERE a.x = c.x AND
    b.y = c.y` joins c before b). From the first explicit JOIN on, the joins keep their order."""
    def implicit(j: exp.Join) -> bool:
        return (j.args.get("kind") or "").upper() in ("", "CROSS") and not j.args.get("side") \
            and not j.args.get("on") and not j.args.get("using") and not j.args.get("method")

    n = next((i for i, j in enumerate(joins) if not implicit(j)), len(joins))  # the leading comma list
    pending = [(j, _positioned(make_item(j.this), pos)) for pos, j in enumerate(joins[:n], start=1)]
    ordered: list[tuple[exp.Join, Item]] = []
    scope = Scope(ctx, list(items))
    while pending:
        pick = next((p for p in pending if any(scope.links(c, p[1]) for c in where)), pending[0])
        pending.remove(pick)
        ordered.append(pick)
        scope.items.append(pick[1])
    return ordered + [(j, _positioned(make_item(j.this), pos)) for pos, j in enumerate(joins[n:], start=n + 1)]


def _positioned(item: Item, pos: int) -> Item:
    item.pos = pos
    return item


def _constant_key(ctx: PlanContext, op: Operator) -> tuple[Operator, list[str]]:
    """`op` and a join key column of one constant value: a one-row input's group column (its
    key, always 0), else a column 0 added."""
    if ctx.one_row(op):
        return op, [op.key[0]]
    const = ctx.name("one")
    return ctx.passthrough(op, (const, "0L")), [const]


def _star_after_using(star: list[tuple[str, str]] | None, items: list[Item], right: Item, using: list[str],
                      jtype: str) -> list[tuple[str, str]]:
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


def _using(ctx: PlanContext, name: str, items: list[Item], right: Item, jtype: str) -> exp.Expr:
    """`JOIN right USING (name)`: the equality of `name` on both sides, and the two columns
    merged into one, as PostgreSQL: the left one's for an inner or left join, the right one's
    for a right join, their COALESCE for a full join."""
    left = [it for it in items if name in it.cols and name not in it.merged]
    if len(left) != 1 or name not in right.cols:
        where = "the left side" if len(left) != 1 else repr(right.alias)
        problem = "is ambiguous in" if len(left) > 1 else "is not a column of"
        raise ctx.err(f"column {name!r} named in USING {problem} {where}", name)
    if jtype == "right":
        left[0].merged.add(name)
    else:
        right.merged.add(name)
        if jtype == "full":
            left[0].coalesce[name] = right.cols[name]
    return exp.EQ(this=exp.column(name, table=left[0].alias), expression=exp.column(name, table=right.alias))


# --- join conditions ---------------------------------------------------------------------------
def on_side(ctx: PlanContext, node: Operator, conds: list[exp.Expr], items: list[Item], keys: list[str], *,
            preserved: bool) -> tuple[Operator, list[str]]:
    """A join side (and its join keys) under the ON clause's conditions on that side alone, as
    PostgreSQL: a row failing them matches nothing. On a side the join drops unmatched rows of,
    such rows are filtered out before it; on a preserved side they must stay, NULL-padded, so
    the first join key becomes NULL on them instead (a NULL key never matches)."""
    if not conds:
        return node, keys
    if not preserved:
        return filter_rows(ctx, node, conds, items), keys
    scope = Scope(ctx, items)
    pred = " AND ".join(f"({scope.resolve(c, 'ON')})" for c in conds)
    gated = ctx.name("on_key")
    return ctx.passthrough(node, (gated, f"CASE WHEN {pred} THEN `{keys[0]}` END")), [gated, *keys[1:]]


def common_numeric(ctx: PlanContext, a: str, b: str) -> str | None:
    """The type two numeric join keys are compared as (Spark's, as `COALESCE(a, b)`), None unless
    both are numeric."""
    if not (SqlType(a).is_numeric and SqlType(b).is_numeric):
        return None
    return ctx.oracle.common_type(a, b)


def cast_keys(ctx: PlanContext, node: Operator, keys: list[str], casts: dict[int, str]
              ) -> tuple[Operator, list[str]]:
    extra = []
    out = list(keys)
    for i, t in casts.items():
        out[i] = ctx.name("key")
        extra.append((out[i], f"CAST(`{keys[i]}` AS {SqlType(t).spark})"))
    return ctx.passthrough(node, *extra), out


def null_safe_keys(ctx: PlanContext, node: Operator, keys: list[str], null_safe: set[int]
                   ) -> tuple[Operator, list[str]]:
    """Join keys where NULL matches NULL (`IS NOT DISTINCT FROM`): each such key becomes two
    that are never NULL, whether it is NULL and its value with NULL replaced by a constant."""
    extra: list[tuple[str, str]] = []
    out: list[str] = []
    for i, k in enumerate(keys):
        if i not in null_safe:
            out.append(k)
            continue
        flag, value = ctx.name("is_null"), ctx.name("not_null")
        extra += [(value, f"COALESCE(`{k}`, {_zero(node.type_of(k))})"), (flag, f"`{k}` IS NULL")]
        out += [value, flag]
    return ctx.passthrough(node, *extra), out


def filter_rows(ctx: PlanContext, node: Operator, conds: list[exp.Expr], items: list[Item]) -> Operator:
    """`node`, whose columns include those of `items`, without its rows failing `conds`. A
    condition on one scanned relation that no outer join NULL-pads goes into its scan; the rest
    into a projection above `node`."""
    scope = Scope(ctx, items)
    rest = []
    for c in conds:
        owner = scope.single_item(c)
        if owner is not None and not owner.nullable and isinstance(owner.node, Scan):
            restrict(owner.node, scope.resolve(c, "ON"))
        else:
            rest.append(c)
    if not rest:
        return node
    pred = " AND ".join(f"({scope.resolve(c, 'ON')})" for c in rest)
    return ctx.passthrough(node, predicate=pred)


def restrict(scan: Scan, predicate: str) -> None:
    """A predicate pushed into a scan, ANDed with the one it has."""
    scan.predicate = Expr.of_text(predicate if scan.predicate is None else f"({scan.predicate}) AND ({predicate})")


def _zero(type_name: str) -> str:
    """A constant of the type, in Spark SQL."""
    t = SqlType(type_name)
    text = "0" if t.is_numeric else {"boolean": "false", "date": "'1970-01-01'", "timestamp": "'1970-01-01'",
                                     "timestamptz": "'1970-01-01'"}.get(t.name, "''")
    return f"CAST({text} AS {t.spark})"
