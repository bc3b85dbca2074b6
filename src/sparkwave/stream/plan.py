"""A dataflow MV's operator tree, as stored in the catalog.

Every node produces a **Z-set** of rows: each row carries a weight `_w` (+1 inserted, -1 retracted),
so an update is a retraction of the old row and an insertion of the new one. Columns have internal
names unique within the plan (`c<n>_<name>`); `key` names the columns that identify a row of the
node's output (a scan's upstream key, a join's two keys, an aggregate's group).

- `scan`: an upstream relation's change rows (or snapshot), with an optional TUMBLE/HOP window,
  a pushed-down predicate and projections, all evaluated by Spark.
- `project`: Spark expressions and a predicate over its input's columns.
- `join`: an equi-join of two inputs (inner, left, right, full), with a state table per side
  arranged by join key.
- `agg`: GROUP BY with count/sum/avg/min/max/count distinct, a state table of partials per group and,
  for min/max/count distinct, one of value counts per (group, value)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparkwave.core.schema import Column, Schema, SqlType

AGG_FUNCTIONS = ("count_star", "count", "sum", "avg", "min", "max", "count_distinct")


@dataclass
class Agg:
    fn: str  # one of AGG_FUNCTIONS
    arg: str | None  # input column (None for count_star)
    out: str  # output column
    type: str  # output SQL type

    def to_json(self) -> dict:
        return {"fn": self.fn, "arg": self.arg, "out": self.out, "type": self.type}

    @staticmethod
    def from_json(d: dict) -> Agg:
        return Agg(d["fn"], d["arg"], d["out"], d["type"])


@dataclass
class Node:
    id: int
    op: str  # scan | project | join | agg
    columns: list[tuple[str, str]]  # (internal name, SQL type name), in output order
    key: list[str]
    inputs: list[Node] = field(default_factory=list)
    relation: str | None = None  # scan
    window: dict[str, Any] | None = None  # scan: {"kind": "tumble"|"hop", "time": col, "size": s, "slide": s}
    exprs: list[tuple[str, str]] = field(default_factory=list)  # scan, project: (column, Spark SQL)
    predicate: str | None = None  # scan, project
    join_type: str | None = None  # join: inner | left | right | full
    left_keys: list[str] = field(default_factory=list)
    right_keys: list[str] = field(default_factory=list)
    group: list[str] = field(default_factory=list)  # agg
    aggs: list[Agg] = field(default_factory=list)
    scalar: bool = False  # agg without GROUP BY: always one row

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.columns]

    def type_of(self, name: str) -> str:
        return dict(self.columns)[name]

    def walk(self) -> list[Node]:
        """This node and every node below it, inputs first."""
        out: list[Node] = []
        for i in self.inputs:
            out.extend(i.walk())
        out.append(self)
        return out

    @property
    def stateless(self) -> bool:
        """Scans and projections only: each output row follows from one input row, so the tree runs
        whole in Spark and its changes of several epochs can be computed in one job."""
        return all(n.op in ("scan", "project") for n in self.walk())

    def scans(self) -> list[Node]:
        return [n for n in self.walk() if n.op == "scan"]

    def to_json(self) -> dict:
        d: dict[str, Any] = {"id": self.id, "op": self.op, "columns": [list(c) for c in self.columns],
                             "key": self.key, "inputs": [i.to_json() for i in self.inputs]}
        for name in ("relation", "window", "predicate", "join_type"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        for name in ("exprs",):
            if getattr(self, name):
                d[name] = [list(e) for e in getattr(self, name)]
        for name in ("left_keys", "right_keys", "group"):
            if getattr(self, name):
                d[name] = getattr(self, name)
        if self.aggs:
            d["aggs"] = [a.to_json() for a in self.aggs]
        if self.scalar:
            d["scalar"] = True
        return d

    @staticmethod
    def from_json(d: dict) -> Node:
        return Node(d["id"], d["op"], [(n, t) for n, t in d["columns"]], list(d["key"]),
                    [Node.from_json(i) for i in d.get("inputs", [])], d.get("relation"), d.get("window"),
                    [(n, e) for n, e in d.get("exprs", [])], d.get("predicate"), d.get("join_type"),
                    list(d.get("left_keys", [])), list(d.get("right_keys", [])), list(d.get("group", [])),
                    [Agg.from_json(a) for a in d.get("aggs", [])], d.get("scalar", False))


def sum_type(arg_type: str) -> str:
    """The type sums of `arg_type` accumulate in (as DuckDB and PostgreSQL: exact for integers and
    decimals)."""
    if arg_type in ("smallint", "int", "bigint"):
        return "bigint"
    if arg_type.startswith("decimal"):
        return f"decimal(38,{arg_type.split(',')[1]}"
    return "double"


def value_args(agg: Node) -> list[str]:
    """The input columns whose values an aggregate counts per group (min, max, count distinct)."""
    seen: list[str] = []
    for a in agg.aggs:
        if a.fn in ("min", "max", "count_distinct") and a.arg and a.arg not in seen:
            seen.append(a.arg)
    return seen


def agg_partials(agg: Node) -> list[tuple[str, str]]:
    """An aggregate state's columns after the group: `_count` (rows per group) and per aggregate
    `p<i>` (its partial) and, for sum and avg, `n<i>` (non-null inputs)."""
    child = agg.inputs[0]
    cols = [("_count", "bigint")]
    for i, a in enumerate(agg.aggs):
        if a.fn == "count_star":
            continue
        arg_type = child.type_of(a.arg) if a.arg else "bigint"
        if a.fn in ("sum", "avg"):
            cols += [(f"p{i}", sum_type(arg_type)), (f"n{i}", "bigint")]
        elif a.fn in ("min", "max"):
            cols.append((f"p{i}", arg_type))
        else:
            cols.append((f"p{i}", "bigint"))
    return cols


def state_purpose(suffix: str, key: tuple[str, ...]) -> str:
    """What a state table holds, for DESCRIBE."""
    if m := re.fullmatch(r"j(\d+)([lr])", suffix):
        side = "left" if m.group(2) == "l" else "right"
        return f"{side} input of join {m.group(1)}, arranged by join key, then row key: ({', '.join(key)})"
    if m := re.fullmatch(r"a(\d+)v\d+", suffix):
        return f"value counts of aggregate {m.group(1)} per ({', '.join(key)}), for min/max/count distinct"
    if m := re.fullmatch(r"a(\d+)", suffix):
        return f"partial aggregates of aggregate {m.group(1)} per group ({', '.join(key)})"
    return "operator state"


def state_schemas(root: Node) -> dict[str, Schema]:
    """The internal state tables of a plan by suffix: `j<id>l` / `j<id>r` per join side (its rows,
    keyed by join key first), `a<id>` per aggregate (partials per group) and `a<id>v<n>` per
    value an aggregate counts per group (for min, max, count distinct)."""
    out: dict[str, Schema] = {}

    def schema(cols: list[tuple[str, str]], key: list[str]) -> Schema:
        return Schema(tuple(Column(n, SqlType(t)) for n, t in cols), tuple(dict.fromkeys(key)))

    for n in root.walk():
        if n.op == "join":
            left, right = n.inputs
            out[f"j{n.id}l"] = schema(left.columns, n.left_keys + left.key)
            out[f"j{n.id}r"] = schema(right.columns, n.right_keys + right.key)
        elif n.op == "agg":
            child = n.inputs[0]
            gcols = [(g, child.type_of(g)) for g in n.group]
            out[f"a{n.id}"] = schema(gcols + agg_partials(n), n.group)
            for j, arg in enumerate(value_args(n)):
                out[f"a{n.id}v{j}"] = schema(gcols + [(arg, child.type_of(arg)), ("_count", "bigint")],
                                             [*n.group, arg])
    return out
