"""Query shapes no materialized view supports, checked the same way by both planners so that a
user gets one message per clause whichever path the query would take."""

from __future__ import annotations

from sqlglot import exp

from sparkwave.frontend.statements import Statement

# what the user may have typed, for pointing at it
_NON_DETERMINISTIC = {exp.Rand: ("random", "rand"), exp.CurrentTimestamp: ("now", "current_timestamp"),
                      exp.CurrentDate: ("current_date",), exp.CurrentTime: ("current_time",),
                      exp.Uuid: ("gen_random_uuid", "uuid")}


def check_shape(stmt: Statement, q: exp.Select) -> None:
    """Refuse ORDER BY / LIMIT / OFFSET (a group top-n), WITH, QUALIFY, OVER, aggregate FILTER and
    non-deterministic functions, naming the clause."""
    for arg, clause in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        if q.args.get(arg):
            raise stmt.error(f"unsupported clause {clause} in a materialized view: it needs a group top-n, "
                             "which is not supported", clause)
    for arg, clause in (("with", "WITH"), ("qualify", "QUALIFY")):
        if q.args.get(arg):
            raise stmt.error(f"unsupported clause {clause} in a materialized view", clause)
    if q.find(exp.Window):
        raise stmt.error("unsupported window function (OVER ...) in a materialized view; time windows are the "
                         "TUMBLE and HOP table functions", "OVER")
    if q.find(exp.Filter):
        raise stmt.error("unsupported aggregate FILTER (WHERE ...) in a materialized view; use CASE WHEN inside "
                         "the aggregate", "FILTER")
    for node in q.find_all(*_NON_DETERMINISTIC):
        words = _NON_DETERMINISTIC[type(node)]
        typed = next((w for w in words if stmt.where(w) != stmt.where()), words[0])
        raise stmt.error(f"non-deterministic function {typed}() is not allowed in a materialized view: its "
                         "result would differ between the backfill and the live updates", typed)
