"""The join executor: an equi-join (inner, left, right, full) of two Z-sets, with one state table per
side arranged by join key (`j<id>l`, `j<id>r`: the side's rows, keyed by join key then row key).

Per epoch, for every join key the epoch touches on either side, the output rows of that key are
recomputed from both sides' rows before and after the epoch, and the difference is emitted:
`J(L', R') - J(L, R)` restricted to the touched keys. This is exact for every join type (an outer
join's NULL-padded rows appear and disappear as a key gains or loses matches), and its cost follows
the rows of the touched keys, looked up in the state tables. Rows with a NULL join key never match:
they pass through NULL-padded on a preserved side and are not stored."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.zset import W, distinct, net, with_weight
from sparkwave.storage.state import StateIO
from sparkwave.stream.plan import Node

_PYARROW_JOIN = {"inner": "inner", "left": "left outer", "right": "right outer", "full": "full outer"}


def _has_null_key(t: pa.Table, keys: list[str]) -> pa.ChunkedArray:
    mask = pc.is_null(t[keys[0]])
    for k in keys[1:]:
        mask = pc.or_(mask, pc.is_null(t[k]))
    return mask


def _apply(old: pa.Table, delta: pa.Table) -> pa.Table:
    """A side's rows after the epoch: its rows before plus the epoch's Z-set."""
    both = net(pa.concat_tables([with_weight(old, 1), delta.select(old.column_names + [W]).cast(
        with_weight(old, 1).schema)]))
    return both.filter(pc.greater(both[W], 0)).drop_columns([W])


def _join(node: Node, left: pa.Table, right: pa.Table) -> pa.Table:
    assert node.join_type is not None, "BUG: a join node without a join type"
    out = left.join(right, node.left_keys, right_keys=node.right_keys, join_type=_PYARROW_JOIN[node.join_type],
                    coalesce_keys=False, use_threads=False)
    return out.select(node.names)


def join(node: Node, dl: pa.Table | None, dr: pa.Table | None, states: StateIO, schemas: tuple[pa.Schema, pa.Schema]
         ) -> pa.Table:
    left_schema, right_schema = schemas
    dl = dl if dl is not None else with_weight(left_schema.empty_table(), 1)
    dr = dr if dr is not None else with_weight(right_schema.empty_table(), 1)
    lk, rk = node.left_keys, node.right_keys
    l_null, r_null = _has_null_key(dl, lk), _has_null_key(dr, rk)
    padded = []
    if node.join_type in ("left", "full"):
        padded.append(_pad(node, dl.filter(l_null), right_schema, left_side=True))
    if node.join_type in ("right", "full"):
        padded.append(_pad(node, dr.filter(r_null), left_schema, left_side=False))
    dl, dr = dl.filter(pc.invert(l_null)), dr.filter(pc.invert(r_null))
    keys = pa.concat_tables([distinct(dl, lk), distinct(dr, rk).rename_columns(lk).cast(distinct(dl, lk).schema)])
    keys = distinct(keys, lk)
    l_old = states.lookup(f"j{node.id}l", lk, keys).select(left_schema.names).cast(left_schema)
    r_old = states.lookup(f"j{node.id}r", rk, keys.rename_columns(rk)).select(right_schema.names).cast(right_schema)
    l_new, r_new = _apply(l_old, dl), _apply(r_old, dr)
    states.stage(f"j{node.id}l", dl)
    states.stage(f"j{node.id}r", dr)
    before, after = _join(node, l_old, r_old), _join(node, l_new, r_new)
    out = pa.concat_tables([with_weight(before, -1), with_weight(after, 1).cast(with_weight(before, -1).schema)]
                           + [p.cast(with_weight(before, -1).schema) for p in padded])
    return net(out)


def _pad(node: Node, rows: pa.Table, other: pa.Schema, *, left_side: bool) -> pa.Table:
    nulls = pa.table({f.name: pa.nulls(rows.num_rows, f.type) for f in other})
    cols = {**{c: rows[c] for c in rows.column_names if c != W}, **{c: nulls[c] for c in nulls.column_names}}
    return pa.table({**{n: cols[n] for n in node.names}, W: rows[W]})
