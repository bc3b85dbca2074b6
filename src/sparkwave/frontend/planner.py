"""Planning `CREATE MATERIALIZED VIEW ... AS SELECT` into an operator tree (`stream/plan.py`): the one
planner of every MV, from a projection of one table to joins, aggregates, time windows and window
functions. The passes live in `frontend/plan/` (see its `__init__`); this module is the entry the
DDL uses.

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
into its scan where no outer join can NULL-pad it. Anything else the parser accepts is refused by
name (`plan/closed_world.py`).

Expressions keep PostgreSQL's semantics where Spark's differ (`frontend/postgres.py`): `/` between integers truncates
toward zero, and a decimal `sum` or `avg` accumulates exactly (`plan/decimals.py`)."""

from __future__ import annotations

from sparkwave.frontend.plan.explain import explain
from sparkwave.frontend.plan.planner import MvPlan, Planner
from sparkwave.frontend.plan.static_types import StaticTypes
from sparkwave.frontend.plan.types import SparkTypes, TypeOracle

__all__ = ["MvPlan", "Planner", "SparkTypes", "StaticTypes", "TypeOracle", "explain"]
