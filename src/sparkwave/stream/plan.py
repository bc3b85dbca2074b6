"""An MV's operator tree as the catalog stores it: the closed set of operator types, their JSON,
and the state tables of a tree.

- `Scan` (`stream/scan.py`): an upstream relation's change rows (or snapshot), with an optional
  TUMBLE/HOP window, a pushed-down predicate and projections, all evaluated by Spark.
- `Project` (`stream/project.py`): Spark expressions and a predicate over its input's columns.
- `Join` (`stream/join.py`): an equi-join of two inputs (inner, left, right, full), with a state
  table per side arranged by join key, except a side that is an aggregate's output, which reads the
  aggregate's partials (`stream/aggregate_side.py`).
- `AsofJoin` (`stream/asof_join.py`): `ASOF [LEFT] JOIN`, a join whose left rows each take the
  right row of their key closest in time under one inequality; state tables as a `Join`'s.
- `Aggregate` (`stream/aggregate.py`): GROUP BY with count/sum/avg/min/max/count distinct, a state
  table of partials per group and, for min/max/count distinct, one of value counts per (group, value).
- `Values` (`stream/values.py`): constant rows, evaluated once.
- `OverWindow` (`stream/over.py`): window functions (`... OVER (PARTITION BY ... ORDER BY ...)`),
  with a state table of its input's rows arranged by partition.
- `Eowc` (`stream/eowc.py`): EMIT ON WINDOW CLOSE, a buffer of its input's rows keyed by a
  watermarked column, each emitted once (an insert) when the watermark passes it.
- `Share` (`stream/share.py`): one operator read by several parents (a subplan the query spells
  twice), evaluated once per epoch and per build.
- `Union` (`stream/union.py`): `UNION ALL` of its inputs, each row tagged with its branch; no state.
- `TemporalFilter` (`stream/temporal_filter.py`): `ts > NOW() - INTERVAL ...` / `ts <= NOW()`, rows
  leaving or appearing as the epochs' NOW() advances, with a state table of its input's rows by time.
- `TemporalJoin` (`stream/temporal_join.py`): `JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`, each stream
  row looked up in table t as it arrives, never retracted by t's changes.
- `ProjectSet` (`stream/project_set.py`): `generate_series` / `unnest`, each input row as 0..n rows
  numbered by an ordinal in the key; no state.

The root's Z-set becomes the MV's rows in `Materialize` (`stream/materialize.py`); `Dataflow`
(`stream/dataflow.py`) drives a tree per epoch and from a snapshot.

Stored JSON, per operator (warehouses keep it, so it does not change):
`{"id", "op", "columns": [[name, type]...], "key", "inputs": [...]}` plus the operator's own fields,
`op` being "scan" | "project" | "join" | "agg" | "over" | "values" | "share" | "asof_join" |
"temporal_filter" | "temporal_join" | "union" (its `branches`) | "project_set" (its `sets`,
`ordinal`). A share's input is stored under each of its parents. Fields were only ever added,
never changed; a version that predates one cannot run a plan that uses it (a join's `borrowed`
sides: it would look for state tables the plan does not have)."""

from __future__ import annotations

from typing import Any

from sparkwave.core.errors import CatalogError
from sparkwave.core.schema import Schema
from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.asof_join import AsofJoin
from sparkwave.stream.eowc import Eowc
from sparkwave.stream.join import Join
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.project_set import ProjectSet
from sparkwave.stream.scan import Scan
from sparkwave.stream.share import Share
from sparkwave.stream.temporal_filter import TemporalFilter
from sparkwave.stream.temporal_join import TemporalJoin
from sparkwave.stream.union import Union
from sparkwave.stream.values import Values

OPERATORS: dict[str, type[Operator]] = {cls.op: cls for cls in (Scan, Project, Join, Aggregate, OverWindow, Values,
                                                                Share, AsofJoin, TemporalFilter, Union, Eowc,
                                                                TemporalJoin, ProjectSet)}


def from_json(d: dict[str, Any], shares: dict[int, Operator] | None = None) -> Operator:
    """The operator tree stored as `d`; each share (by id) decoded once, as one object under all its parents."""
    shares = {} if shares is None else shares
    cls = OPERATORS.get(d["op"])
    if cls is None:
        raise CatalogError(f"a stored plan has operator {d['op']!r}, which this version of sparkwave does not know; "
                           f"known: {', '.join(OPERATORS)}")
    if cls is Share and d["id"] in shares:
        return shares[d["id"]]
    op = cls.from_json(d, [from_json(i, shares) for i in d.get("inputs", [])])
    if cls is Share:
        shares[d["id"]] = op
    return op


def state_schemas(root: Operator) -> dict[str, Schema]:
    """The state tables of a tree by suffix, inputs first: `j<id>l` / `j<id>r` per join side (its
    rows, keyed by join key first; none for a side read from an aggregate's partials), `a<id>` per
    aggregate (partials per group) and `a<id>v<n>` per value an aggregate counts per group (for
    min, max, count distinct), `w<id>` per window operator (its input's rows, keyed by partition
    first)."""
    return {suffix: schema for op in root.walk() for suffix, schema in op.state_tables().items()}


def state_purpose(suffix: str, key: tuple[str, ...]) -> str:
    """What a state table holds, for DESCRIBE."""
    for cls in OPERATORS.values():
        if (purpose := cls.state_purpose(suffix, key)) is not None:
            return purpose
    return "operator state"
