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

_OLD_SEQ = -1  # the old rows go first in each key's sequence


def resolve(intents: pa.Table, old: pa.Table, key: list[str], values: list[str], rule: OnConflict) -> pa.Table:
    """`intents` `| _op | _seq | _vnode | key | values |` with each INSERT of a key that exists when it
    comes (in the old rows `| _vnode | key | values |`, or by an earlier intent) dropped or merged
    per `rule`. One sorted pass: a key exists after any intent but a key delete, so whether it
    exists before an intent is told by the intent before it (the old row, for the first)."""
    inserts = pc.equal(intents["_op"], int(Op.INSERT))
    if rule == "overwrite" or not pc.any(inserts).as_py():
        return intents
    names = intents.column_names
    held = old.select([c for c in names if c not in ("_op", "_seq")]).append_column(
        "_op", pa.array([int(Op.UPDATE_INSERT)] * old.num_rows, pa.int8())).append_column(
        "_seq", pa.array([_OLD_SEQ] * old.num_rows, pa.int64())).select(names)
    rows = pa.concat_tables([held, intents.cast(held.schema)]).sort_by(
        [*[(k, "ascending") for k in key], ("_seq", "ascending")])
    n = rows.num_rows
    first = pc.invert(_same_key_as_previous(rows, key))
    before = pa.concat_arrays([pa.array([int(Op.KEY_DELETE)], pa.int8()), rows["_op"].combine_chunks().slice(0, n - 1)])
    existed = pc.and_(pc.invert(first), pc.not_equal(before, int(Op.KEY_DELETE)))
    conflict = pc.and_(pc.equal(rows["_op"], int(Op.INSERT)), existed)
    if rule == "ignore":
        rows = rows.filter(pc.invert(conflict))
    else:
        position = pa.array(range(n), pa.int64())
        for v in values:  # a conflicting INSERT's NULL takes the value the key had before it
            fill = pc.and_(conflict, pc.is_null(rows[v]))
            source = pc.fill_null_forward(pc.if_else(fill, pa.scalar(None, pa.int64()), position))
            rows = rows.set_column(rows.schema.get_field_index(v), v, rows[v].take(source))
    return rows.filter(pc.not_equal(rows["_seq"], _OLD_SEQ))


def _same_key_as_previous(rows: pa.Table, key: list[str]) -> pa.Array:
    """Per row of `rows` (sorted by `key`, at least one), whether the row before it has the same key."""
    n = rows.num_rows
    same = pa.array([True] * n, pa.bool_())
    for k in key:
        col = rows[k].combine_chunks()
        equal = pc.fill_null(pc.equal(col.slice(1), col.slice(0, n - 1)), False)
        same = pc.and_(same, pa.concat_arrays([pa.array([False]), equal]))
    return same
