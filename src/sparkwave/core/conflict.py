"""A keyed table's `ON CONFLICT` rule: what an INSERT of a key the table already holds does.

RisingWave's three behaviours, applied in a table's materialize step before its intents are netted
(`core/chunk.consolidate`), in `_seq` order within the epoch, so that an INSERT meets the row as
the epoch's earlier statements left it:
- `overwrite` (the default; `DO UPDATE FULL`): the new row replaces the old one (no work here);
- `ignore` (`DO NOTHING`): the INSERT is dropped;
- `update_if_not_null`: the new row's non-NULL values replace the old row's, the NULL ones keep it.

An UPDATE's intents (+U) and key deletes apply as they are; only INSERT intents (+I) conflict."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.core.chunk import Op

OnConflict = Literal["overwrite", "ignore", "update_if_not_null"]
ON_CONFLICT: tuple[OnConflict, ...] = ("overwrite", "ignore", "update_if_not_null")

_EXISTS, _RANK, _I, _CUR = "_sw_exists", "_sw_rank", "_sw_i", "_sw_cur_"


def resolve(intents: pa.Table, old: pa.Table, key: list[str], values: list[str], rule: OnConflict) -> pa.Table:
    """`intents` `| _op | _seq | _vnode | key | values |` with each INSERT of a key that exists when it
    comes (in the old rows `| key | values |`, or by an earlier intent) dropped or merged per `rule`.
    Processed in rounds, the n-th intent of every key in round n: one vectorised pass per round, and
    an epoch rarely writes a key more than once."""
    inserts = pc.equal(intents["_op"], int(Op.INSERT))
    if rule == "overwrite" or not pc.any(inserts).as_py():
        return intents
    ordered = intents.sort_by([*[(k, "ascending") for k in key], ("_seq", "ascending")])
    ordered = ordered.append_column(_I, pa.array(range(ordered.num_rows), pa.int64()))
    first = ordered.group_by(key, use_threads=False).aggregate([(_I, "min")])
    ordered = ordered.join(first, keys=key).sort_by(_I)  # join reorders rows
    ordered = ordered.append_column(_RANK, pc.subtract(ordered[_I], ordered[f"{_I}_min"]))
    current = old.select([*key, *values]).append_column(_EXISTS, pa.array([True] * old.num_rows, pa.bool_()))
    out = []
    for r in range(pc.max(ordered[_RANK]).as_py() + 1):
        rows = ordered.filter(pc.equal(ordered[_RANK], r)).select(intents.column_names)
        rows, current = _round(rows, current, key, values, rule)
        out.append(rows)
    return pa.concat_tables(out).sort_by("_seq") if out else intents.slice(0, 0)


def _round(rows: pa.Table, current: pa.Table, key: list[str], values: list[str], rule: OnConflict
           ) -> tuple[pa.Table, pa.Table]:
    """One intent per key against each key's current row: the intents kept (merged), and the
    current rows after them."""
    cur = current.rename_columns([c if c in key else _CUR + c for c in current.column_names])
    both = rows.append_column(_I, pa.array(range(rows.num_rows), pa.int64())) \
        .join(cur, keys=key, join_type="left outer").sort_by(_I)
    exists = pc.fill_null(both[_CUR + _EXISTS], False)
    conflict = pc.and_(pc.equal(both["_op"], int(Op.INSERT)), exists)
    if rule == "ignore":
        kept = both.filter(pc.invert(conflict))
    else:
        kept = both
        for v in values:
            merged = pc.if_else(pc.and_(conflict, pc.is_null(both[v])), both[_CUR + v], both[v])
            kept = kept.set_column(kept.schema.get_field_index(v), v, merged.cast(both.schema.field(v).type))
    kept = kept.select(rows.column_names)
    after = kept.select([*key, *values]).append_column(
        _EXISTS, pc.not_equal(kept["_op"], int(Op.KEY_DELETE)))
    untouched = current.join(kept.select(key), keys=key, join_type="left anti")
    return kept, pa.concat_tables([untouched, after.cast(untouched.schema)])
