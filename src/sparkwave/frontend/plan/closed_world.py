"""Closed world: every part of a query the planner is given is either consumed or refused by name.

sqlglot parses far more than the planner plans (ASOF joins, `FOR SYSTEM_TIME AS OF`, TABLESAMPLE,
GROUPING SETS, named WINDOWs, ...); a clause the planner does not look at would be silently dropped
and the MV would hold a wrong answer. So the planner sees a query only after `check_closed` walks
it: each node's class must be in `HANDLED`, with the args the planner consumes (or itself refuses
with a message of its own), and an arg outside that set, if set, is refused by name. Function calls
are the allowlist of `functions.FUNCTIONS` (checked when a statement is parsed): a call there is
written to Spark SQL whole, except the args `_FUNCTION_ARGS_REFUSED` names.
`tests/unit/test_planner_closed_world.py` walks every sqlglot expression class."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sparkwave.core.errors import SqlError
from sparkwave.frontend.functions import function_of
from sparkwave.frontend.plan.proctime import SHAPE as TEMPORAL_JOIN
from sparkwave.frontend.plan.proctime import is_proctime

ALL = frozenset({"*"})  # every arg: sqlglot writes the node to Spark SQL whole
_OPERATORS = ("this", "expression")

# class -> the args the planner consumes, or refuses itself with its own message
HANDLED: dict[type[exp.Expr], frozenset[str]] = {
    # query structure (planner.py, select.py, joins.py, aggregates.py, rewrite.py, shape.py)
    exp.Select: frozenset({"expressions", "from_", "joins", "where", "group", "having", "distinct", "with_",
                           "order", "limit", "offset", "qualify"}),
    exp.From: frozenset({"this"}),
    exp.Join: frozenset({"this", "on", "using", "side", "kind", "method"}),
    exp.Table: frozenset({"this", "alias", "db", "catalog", "version",  # version: check_dropped, temporal_join.py
                          "ordinality"}),  # of a set-returning call: plan/project_set.py (which refuses it elsewhere)
    exp.Lateral: frozenset({"this", "alias", "ordinality", "view", "outer", "cross_apply"}),  # plan/project_set.py
    exp.Version: frozenset({"this", "kind", "expression"}),  # AS OF PROCTIME() only (check_dropped)
    exp.TableAlias: frozenset({"this", "columns"}),
    exp.Subquery: frozenset({"this", "alias"}),
    exp.Values: frozenset({"expressions", "alias", "order", "limit", "offset"}),
    exp.Tuple: frozenset({"expressions"}),
    exp.Where: frozenset({"this"}),
    exp.Having: frozenset({"this"}),
    exp.Qualify: frozenset({"this"}),
    exp.Group: frozenset({"expressions"}),
    exp.Order: frozenset({"this", "expressions"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Limit: frozenset({"this", "expression"}),
    exp.Offset: frozenset({"this", "expression"}),
    exp.Fetch: ALL,  # FETCH FIRST n ROWS: a LIMIT to `rewrite`
    exp.LimitOptions: ALL,  # its WITH TIES: `rewrite` refuses it
    exp.Distinct: frozenset({"expressions", "on"}),
    exp.With: frozenset({"expressions", "recursive"}),
    exp.CTE: frozenset({"this", "alias", "materialized"}),
    # set operations and grouping sets (plan/setops.py, plan/grouping_sets.py; ORDER BY / LIMIT: rewrite.py)
    **{cls: frozenset({"this", "expression", "distinct", "with_", "order", "limit", "offset", "by_name", "kind", "on"})
       for cls in (exp.Union, exp.Intersect, exp.Except)},
    **{cls: frozenset({"expressions"}) for cls in (exp.GroupingSets, exp.Rollup, exp.Cube, exp.Grouping)},
    exp.Window: frozenset({"this", "partition_by", "order", "spec", "alias", "over"}),
    exp.WindowSpec: frozenset({"kind", "start", "start_side", "end", "end_side",
                               "exclude"}),  # windows.py: EXCLUDE CURRENT ROW at a ROWS frame's edge, else refused
    exp.Filter: ALL,  # aggregate FILTER: `rewrite` makes it a CASE
    exp.WithinGroup: frozenset({"this", "expression"}),  # ordered-set aggregates: plan/ordered_aggs.py
    exp.Exists: ALL,  # subqueries.py: semi and anti joins
    exp.Any: ALL,
    exp.All: ALL,
    exp.In: frozenset({"this", "expressions", "query"}),
    # names and values
    exp.Column: frozenset({"this", "table"}),
    exp.Star: frozenset(),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Null: frozenset(),
    exp.Boolean: frozenset({"this"}),
    exp.Var: frozenset({"this"}),
    exp.Paren: frozenset({"this"}),
    exp.DataType: frozenset({"this", "expressions", "nested", "values", "kind", "nullable"}),
    exp.DataTypeParam: frozenset({"this", "expression"}),
    exp.Interval: frozenset({"this", "unit"}),
    exp.HexString: ALL,
    exp.ByteString: ALL,
    exp.RawString: ALL,
    # operators: written whole
    **{cls: ALL for cls in (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.DPipe, exp.EQ, exp.NEQ, exp.GT,
                            exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.Like, exp.ILike,
                            exp.SimilarTo, exp.Escape, exp.Between, exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor,
                            exp.BitwiseLeftShift, exp.BitwiseRightShift, exp.BitwiseNot, exp.Neg, exp.Not,
                            exp.AtTimeZone)},
}
# args of an allowed function that Spark SQL would not receive: refused by name
_FUNCTION_ARGS_REFUSED: dict[type[exp.Expr], frozenset[str]] = {
    exp.Cast: frozenset({"format", "action", "default"}),
}
# values of a consumed arg that the planner does not plan
_VALUES_REFUSED: dict[tuple[type[exp.Expr], str], Callable[[object], str | None]] = {
    (exp.Join, "method"): lambda v: None if str(v).upper() in ("", "NATURAL", "ASOF") else f"{str(v).upper()} JOIN",
}
# readable names for refused args (else the arg's name, in capitals)
NAMES: dict[tuple[type[exp.Expr] | None, str], str] = {
    (exp.Table, "version"): "FOR SYSTEM_TIME AS OF",
    (exp.Table, "system_time"): "FOR SYSTEM_TIME AS OF",
    (exp.Table, "sample"): "TABLESAMPLE",
    (exp.Table, "only"): "ONLY",
    (exp.Table, "ordinality"): "WITH ORDINALITY",
    (exp.Table, "rows_from"): "ROWS FROM",
    (exp.Table, "pivots"): "PIVOT",
    (exp.Table, "hints"): "table hints",
    (exp.Join, "match_condition"): "ASOF JOIN ... MATCH_CONDITION",
    (exp.Join, "global_"): "GLOBAL JOIN",
    (exp.Join, "directed"): "DIRECTED JOIN",
    (exp.Select, "windows"): "the WINDOW clause",
    (exp.Select, "locks"): "FOR UPDATE / FOR SHARE",
    (exp.Select, "into"): "SELECT INTO",
    (exp.Select, "laterals"): "LATERAL",
    (exp.Select, "for_"): "FOR",
    (exp.Select, "kind"): "SELECT AS STRUCT / VALUE",
    (exp.Select, "operation_modifiers"): "SELECT modifiers",
    (exp.Select, "exclude"): "SELECT * EXCLUDE",
    (exp.Group, "grouping_sets"): "GROUPING SETS",
    (exp.Group, "cube"): "CUBE",
    (exp.Group, "rollup"): "ROLLUP",
    (exp.Group, "all"): "GROUP BY ALL",
    (exp.Star, "except_"): "* EXCEPT",
    (exp.Star, "replace"): "* REPLACE",
    (exp.Star, "rename"): "* RENAME",
    (exp.Star, "ilike"): "* ILIKE",
    (exp.Ordered, "with_fill"): "WITH FILL",
    (exp.Window, "first"): "FIRST / LAST in OVER",
    (exp.With, "search"): "SEARCH in WITH RECURSIVE",
    (exp.With, "cycle"): "CYCLE in WITH RECURSIVE",
    (exp.Cast, "format"): "CAST ... FORMAT",
    (exp.In, "unnest"): "IN UNNEST",
    (None, "returning"): "RETURNING",
    (None, "pivots"): "PIVOT",
    (None, "sample"): "TABLESAMPLE",
    (None, "match"): "MATCH_RECOGNIZE",
    (None, "connect"): "CONNECT BY",
    (None, "prewhere"): "PREWHERE",
    (None, "settings"): "SETTINGS",
}
# readable names for refused classes (else the class's SQL name)
CLASS_NAMES: dict[type[exp.Expr], str] = {
    exp.Lateral: "LATERAL", exp.Pivot: "PIVOT", exp.TableSample: "TABLESAMPLE", exp.Version: "FOR SYSTEM_TIME AS OF",
    exp.GroupingSets: "GROUPING SETS", exp.Cube: "CUBE", exp.Rollup: "ROLLUP", exp.MatchRecognize: "MATCH_RECOGNIZE",
    exp.Returning: "RETURNING", exp.Bracket: "subscripts (x[i])", exp.Dot: "field access (x.y.z)",
    exp.Lambda: "lambdas", exp.Parameter: "parameters",
    exp.Placeholder: "parameters", exp.IgnoreNulls: "IGNORE NULLS", exp.RespectNulls: "RESPECT NULLS",
    exp.Collate: "COLLATE",
}


def refused_class(cls: type[exp.Expr]) -> str | None:
    """Why a node of `cls` is refused whatever its args (None: it may be handled)."""
    if cls in HANDLED:
        return None
    if issubclass(cls, exp.Func):
        return None  # functions.FUNCTIONS decides, by class or by name
    return CLASS_NAMES.get(cls) or cls.key.upper().replace("_", " ")


def refused_arg(cls: type[exp.Expr], arg: str, value: object) -> str | None:
    """The name of a clause `arg` = `value` of a `cls` node that nothing plans, or None."""
    if (check := _VALUES_REFUSED.get((cls, arg))) is not None:
        return check(value)
    if issubclass(cls, exp.Func) and cls not in HANDLED:
        return arg_name(cls, arg) if arg in _FUNCTION_ARGS_REFUSED.get(cls, frozenset()) else None
    handled = HANDLED.get(cls, frozenset())
    if handled is ALL or arg in handled or (arg == "from" and "from_" in handled) or (arg == "with" and "with_" in
                                                                                      handled):
        return None
    return arg_name(cls, arg)


def arg_name(cls: type[exp.Expr], arg: str) -> str:
    return NAMES.get((cls, arg)) or NAMES.get((None, arg)) or f"{arg.rstrip('_').upper().replace('_', ' ')} " \
                                                               f"(of {cls.key.upper()})"


def _is_set(value: object) -> bool:
    return value is not None and value is not False and value != [] and value != ""


def _keyword(why: str) -> str | None:
    """The word of a refused clause to point at in the statement."""
    return next((w for w in why.split() if w.isupper() and w.isalpha()), None)


def check_closed(query: exp.Expr, error: Callable[[str, str | None], SqlError]) -> None:
    """Refuse the first part of `query` that the planner would not consume, naming it."""
    stack = [query]
    while stack:  # iterative: the tree may be deep
        node = stack.pop()
        cls = type(node)
        if (why := refused_class(cls)) is not None:
            raise error(f"{why} is not supported in a materialized view", _keyword(why))
        if isinstance(node, exp.Func) and cls not in HANDLED and function_of(node) is None:
            name = node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()
            raise error(f"function {name} is not supported; see the README's Functions section for those that are",
                        name)
        for arg, value in node.args.items():
            if _is_set(value) and (why := refused_arg(cls, arg, value)) is not None:
                raise error(f"{why} is not supported in a materialized view", _keyword(why))
        stack.extend(node.iter_expressions())


def check_dropped(query: exp.Expr, error: Callable[[str, str | None], SqlError], *, planned: bool = False) -> None:
    """For any statement, when it is parsed: refuse by name the clauses that a planner would drop or
    Spark would read as something else (an ASOF join as an inner join, `FOR SYSTEM_TIME AS OF` as
    Spark's time travel), before the function check names a function inside them instead. A query
    the planner plans (`planned`: a materialized view's) may have an ASOF join; Spark, which runs
    other queries, has none."""
    for node in query.find_all(exp.Join, exp.Table, exp.Version):
        method = str(node.args.get("method") or "").upper() if isinstance(node, exp.Join) else ""
        if method == "ASOF" and not planned:
            raise error("ASOF JOIN is not supported in a query: create a materialized view with it, and query "
                        "the view", "ASOF")
        if isinstance(node, exp.Join) and (why := refused_arg(exp.Join, "method", method)):
            raise error(f"{why} is not supported", _keyword(why))
        if isinstance(node, exp.Table) and node.args.get("version") and not (
                planned and is_proctime(node.args["version"]) and isinstance(node.parent, exp.Join)):
            raise error("FOR SYSTEM_TIME AS OF is not supported" + (
                " in a query: create a materialized view with the temporal join, and query the view" if not planned
                else f" except as a process-time temporal join: {TEMPORAL_JOIN}"), "FOR")
