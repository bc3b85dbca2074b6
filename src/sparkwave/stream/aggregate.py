"""The aggregate executor: GROUP BY with count, sum, avg, min, max and count(DISTINCT), exact under
retractions, at a per-epoch cost that follows the groups an epoch touches.

State (`plan.state_schemas`):
- `a<id>`: per group, the row count and each aggregate's partial: a count; a sum with its count of
  non-null inputs (sum and avg); the current min / max; the number of distinct values.
- `a<id>v<n>`: per (group, value) of a min/max/count-distinct argument, how many input rows carry it.

Per epoch: the touched groups' partials are looked up, the epoch's weighted partials added, and the
value counts updated. A min or max is recomputed from the group's value counts only when a value
left the group entirely (the retracted value may have been the extreme); otherwise it folds in the
new values. The output is the retraction of each touched group's old row and its new row. A group
whose count reaches zero disappears (and reappears as new). A scalar aggregate (no GROUP BY) always
has its one row: count 0 and NULLs for an empty input."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.schema import SqlType
from sparkwave.core.zset import W, distinct, net, ns_join, with_weight
from sparkwave.storage.state import StateIO
from sparkwave.stream.plan import Node, agg_partials, value_args


def _arrow(t: str) -> pa.DataType:
    return SqlType(t).arrow


def _sum(t: pa.Table, group: list[str], cols: list[str]) -> pa.Table:
    g = t.group_by(group, use_threads=False).aggregate([(c, "sum") for c in cols])
    return g.rename_columns([c[:-4] if c.endswith("_sum") and c[:-4] in cols else c for c in g.column_names])


def aggregate(node: Node, d: pa.Table, states: StateIO) -> pa.Table:
    group = node.group
    sid = f"a{node.id}"
    partials = agg_partials(node)
    ptypes = dict(partials)
    w = d[W]
    pos = pc.greater(w, 0)
    keys = distinct(d, group)

    # The epoch's additive partials per group.
    cols: dict[str, pa.Array | pa.ChunkedArray] = {g: d[g] for g in group}
    cols["_count"] = w
    for i, a in enumerate(node.aggs):
        if a.fn == "count":
            cols[f"p{i}"] = pc.if_else(pc.is_valid(d[a.arg]), w, 0)
        elif a.fn in ("sum", "avg"):
            x = d[a.arg].cast(_arrow(ptypes[f"p{i}"]))
            cols[f"p{i}"] = pc.if_else(pos, x, pc.negate(x))
            cols[f"n{i}"] = pc.if_else(pc.is_valid(x), w, 0)
    additive = [c for c in cols if c not in group]

    old = states.lookup(sid, group, keys)
    delta = pa.table(cols).cast(pa.schema([*[old.schema.field(g) for g in group],
                                            *[pa.field(c, _arrow(ptypes[c])) for c in additive]]))
    both = pa.concat_tables([old.select([*group, *additive]), delta], promote_options="none")
    summed = _sum(both, group, additive)
    new = ns_join(keys, summed, group, "left outer")
    had = ns_join(keys, old.append_column("_had", pa.array([True] * old.num_rows, pa.bool_())), group, "left outer")

    for j, arg in enumerate(value_args(node)):
        new, had = _values(node, j, arg, d, states, new, had)

    new_count = pc.fill_null(new["_count"], 0)
    old_count = pc.fill_null(had["_count"], 0)
    had_state = pc.fill_null(had["_had"], False)
    # Stage the partials: the old row of every group that had one, the new row of every live group.
    state_cols = [*group, *[n for n, _ in partials]]
    old_rows = with_weight(had.filter(had_state).select(state_cols), -1)
    new_rows = with_weight(new.filter(pc.greater(new_count, 0)).select(state_cols), 1)
    states.stage(sid, pa.concat_tables([old_rows.cast(new_rows.schema), new_rows]))

    out_old, out_new = _finalize(node, had), _finalize(node, new)
    if node.scalar:
        olds, news = out_old, out_new
    else:
        olds, news = out_old.filter(pc.greater(old_count, 0)), out_new.filter(pc.greater(new_count, 0))
    return net(pa.concat_tables([with_weight(olds, -1), with_weight(news, 1)]))


def _values(node: Node, j: int, arg: str, d: pa.Table, states: StateIO, new: pa.Table,
            had: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Update the value counts of `arg` and fold them into min / max / count distinct."""
    group = node.group
    sid = f"a{node.id}v{j}"
    by = [*group, arg]
    valid = d.filter(pc.is_valid(d[arg]))
    dc = _sum(valid.select([*by, W]), by, [W])
    old = states.lookup(sid, by, dc).rename_columns([*by, "_old"])
    pairs = ns_join(dc, old, by, "left outer")
    before = pc.fill_null(pairs["_old"], 0)
    after = pc.add(before, pairs[W])
    pairs = pairs.append_column("_new", after)
    states.stage(sid, pa.concat_tables([
        with_weight(pairs.filter(pc.greater(before, 0)).select(by).append_column(
            "_count", pc.fill_null(pairs["_old"], 0).filter(pc.greater(before, 0))), -1),
        with_weight(pairs.filter(pc.greater(after, 0)).select(by).append_column(
            "_count", after.filter(pc.greater(after, 0))), 1)]))

    gained = pc.and_(pc.equal(before, 0), pc.greater(after, 0))
    lost = pc.and_(pc.greater(before, 0), pc.equal(after, 0))
    change = pc.subtract(pc.cast(gained, pa.int64()), pc.cast(lost, pa.int64()))
    per_group = pa.table({**{g: pairs[g] for g in group}, "_dd": change, "_lost": pc.cast(lost, pa.int64())})
    per_group = _sum(per_group, group, ["_dd", "_lost"])
    live = pairs.filter(pc.greater(after, 0))
    ext = live.select(by).group_by(group, use_threads=False).aggregate([(arg, "min"), (arg, "max")]) \
        .rename_columns([*group, "_cmin", "_cmax"])
    per_group = ns_join(per_group, ext, group, "left outer")
    lost_groups = per_group.filter(pc.greater(per_group["_lost"], 0)).select(group)
    if lost_groups.num_rows:
        # A value left its group: recompute the group's extremes from all its value counts.
        full = states.lookup(sid, group, lost_groups).rename_columns([*by, W])
        mine = ns_join(dc, lost_groups, group, "left semi")
        stored = full.select([*by, W])
        counts = _sum(pa.concat_tables([stored, mine.select([*by, W]).cast(stored.schema)]), by, [W])
        counts = counts.filter(pc.greater(counts[W], 0))
        redo = counts.select(by).group_by(group, use_threads=False).aggregate([(arg, "min"), (arg, "max")]) \
            .rename_columns([*group, "_rmin", "_rmax"])
        redo = ns_join(lost_groups, redo, group, "left outer")
        redo = redo.append_column("_redo", pa.array([True] * redo.num_rows, pa.bool_()))
    else:
        atype = d.schema.field(arg).type
        redo = pa.table({**{g: pa.array([], new.schema.field(g).type) for g in group},
                         "_rmin": pa.array([], atype), "_rmax": pa.array([], atype), "_redo": pa.array([], pa.bool_())})
    per_group = ns_join(per_group, redo, group, "left outer")
    mine = [(i, a) for i, a in enumerate(node.aggs) if a.arg == arg and a.fn in ("min", "max", "count_distinct")]
    olds = had.select([*group, *[f"p{i}" for i, _ in mine]]).rename_columns([*group, *[f"_o{i}" for i, _ in mine]])
    merged = ns_join(ns_join(new, olds, group, "left outer"), per_group, group, "left outer")
    redo_flag = pc.fill_null(merged["_redo"], False)
    for i, a in mine:
        o = merged[f"_o{i}"]
        if a.fn == "count_distinct":
            value = pc.add(pc.fill_null(o, 0), pc.fill_null(merged["_dd"], 0))
        elif a.fn == "min":
            value = pc.if_else(redo_flag, merged["_rmin"], _fold(o, merged["_cmin"], pc.less))
        else:
            value = pc.if_else(redo_flag, merged["_rmax"], _fold(o, merged["_cmax"], pc.greater))
        merged = merged.append_column(f"p{i}", value.cast(o.type))
    return merged.select([*new.column_names, *[f"p{i}" for i, _ in mine]]), had


def _fold(current: pa.ChunkedArray, new: pa.ChunkedArray,
          better: Callable[[pa.ChunkedArray, pa.ChunkedArray], pa.ChunkedArray]) -> pa.ChunkedArray:
    """The element-wise min (`better=pc.less`) or max (`pc.greater`) of two columns, NULLs skipped.
    Comparisons have kernels for every column type; `min_element_wise` lacks boolean and
    timestamptz ones."""
    take_new = pc.or_(pc.is_null(current), pc.fill_null(better(new, current), False))
    return pc.if_else(take_new, new, current)


def _finalize(node: Node, p: pa.Table) -> pa.Table:
    """The aggregate's output rows (group, values) from partials; absent partials count as empty."""
    cols: dict[str, pa.ChunkedArray] = {g: p[g] for g in node.group}
    count = pc.fill_null(p["_count"], 0)
    for i, a in enumerate(node.aggs):
        t = _arrow(a.type)
        if a.fn == "count_star":
            v = count
        elif a.fn in ("count", "count_distinct"):
            v = pc.fill_null(p[f"p{i}"], 0)
        elif a.fn == "sum":
            n = pc.fill_null(p[f"n{i}"], 0)
            v = pc.if_else(pc.greater(n, 0), p[f"p{i}"], pa.scalar(None, p[f"p{i}"].type))
        elif a.fn == "avg":
            n = pc.fill_null(p[f"n{i}"], 0)
            v = pc.if_else(pc.greater(n, 0), pc.divide(p[f"p{i}"].cast(pa.float64()), n.cast(pa.float64())),
                           pa.scalar(None, pa.float64()))
        else:
            v = p[f"p{i}"]
        cols[a.out] = v.cast(t)
    return pa.table(cols)
