"""Query shapes no materialized view supports, checked the same way by both planners so that a
user gets one message per clause whichever path the query would take."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend.functions import function_of
from sparkwave.frontend.plan.temporal import WHERE_TO_WRITE, allowed_now
from sparkwave.frontend.statements import Statement


def check_shape(stmt: Statement, q: exp.Select) -> None:
    """Refuse LIMIT / OFFSET left by `rewrite` (it makes ORDER BY ... LIMIT a window), WITH in a
    subquery, QUALIFY, OVER outside the SELECT list and non-deterministic functions, naming the
    clause."""
    for arg, clause in (("limit", "LIMIT"), ("offset", "OFFSET")):
        if q.args.get(arg):
            raise stmt.error(f"unsupported clause {clause} in a materialized view: ORDER BY ... {clause} needs a "
                             "group top-n, which is not supported", clause)
    if q.args.get("with_") or q.args.get("with"):
        raise stmt.error("unsupported WITH inside a subquery of a materialized view; move it to the top", "WITH")
    if q.args.get("qualify"):
        raise stmt.error("unsupported clause QUALIFY in a materialized view", "QUALIFY")
    for w in q.find_all(exp.Window):
        if w.find_ancestor(exp.Select) is q and not _in_select_list(w, q):
            raise stmt.error("a window function (OVER ...) may only be in the SELECT list; filter on it in an "
                             "enclosing query", "OVER")
    if q.find(exp.Filter):
        raise stmt.error("unsupported aggregate FILTER (WHERE ...) in a materialized view; use CASE WHEN inside "
                         "the aggregate", "FILTER")
    for node in q.find_all(exp.Func):
        fn = function_of(node)
        if fn is None or fn.deterministic or (isinstance(node, exp.CurrentTimestamp) and allowed_now(node, q)) \
                or isinstance(node.parent, exp.Version):  # FOR SYSTEM_TIME AS OF PROCTIME(): a temporal join
            continue
        if isinstance(node, exp.CurrentTimestamp):
            typed = "now" if stmt.where("now") != stmt.where() else "current_timestamp"
            raise stmt.error(f"non-deterministic function {typed}() {WHERE_TO_WRITE}", typed)
        typed = next((w for w in fn.names if stmt.where(w) != stmt.where()), fn.names[0])
        raise stmt.error(f"non-deterministic function {typed}() is not allowed in a materialized view: its "
                         "result would differ between the backfill and the live updates", typed)


def _in_select_list(node: exp.Expr, q: exp.Select) -> bool:
    while node.parent is not None and node.parent is not q:
        node = node.parent
    return node.parent is q and node.arg_key == "expressions"
