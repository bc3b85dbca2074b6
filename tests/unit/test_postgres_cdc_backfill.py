"""The CDC backfill's chunk keys without a database: a composite integer key's next position (the
last column plus one, carried at its type's bound), and a chunk assembled from parts read in
parallel (cut at the first part that stopped at its LIMIT, or at the chunk's row limit)."""

from __future__ import annotations

import pyarrow as pa

from sparkwave.connectors.postgres_cdc_backfill import LAST, ChunkReader, _Part
from sparkwave.core.schema import parse_type


def _reader(*types: str) -> ChunkReader:
    columns = [(f"k{i}", parse_type(t)) for i, t in enumerate(types)] + [("v", parse_type("varchar"))]
    return ChunkReader(None, columns, [f"k{i}" for i in range(len(types))], 4, lambda: None)


def test_the_next_key_carries_at_each_columns_bound():
    r = _reader("int", "bigint")
    assert not r.compared and r.parallelism == 1  # a composite key is read by one connection
    assert r.successor((1, 5)) == (1, 6)
    assert r.successor((1, LAST)) == (2, -(1 << 63))
    assert r.successor(((1 << 31) - 1, LAST)) is None
    assert _reader("smallint").successor((32766,)) == (32767,) and _reader("smallint").successor((32767,)) is None
    assert _reader("bigint").parallelism == 4


def test_a_key_python_cannot_order_is_compared_upstream_from_no_key_read():
    from sparkwave.connectors.postgres_cdc_check import KeyColumn

    columns = [("name", parse_type("varchar")), ("n", parse_type("decimal(10,2)")), ("v", parse_type("int"))]
    upstream = {"name": KeyColumn("text", "text", ("pg_catalog", "C")), "n": KeyColumn("numeric", "numeric", None)}
    r = ChunkReader(None, columns, ["name", "n"], 4, lambda: None, upstream)
    assert r.compared and r.parallelism == 1 and r.first_key(None) == ()
    assert r.position(r.splits(())) == () and r.position({"backfill": 0}) == ()  # an earlier release's
    assert r.position(r.splits(("zoë's", "10.50"))) == ("zoë's", "10.50")
    rows = pa.table({"_c0": ["a", "b"], "_c1": ["1.00", "-2.00"], "_c2": ["1", "2"]})
    assert r.after(rows, 1) == ("b", "-2.00") and r.after(rows, 0) == ("a", "1.00")
    uuid = ChunkReader(None, [("id", parse_type("varchar"))], ["id"], 4, lambda: None,
                       {"id": KeyColumn("uuid", "uuid", None)})
    assert not uuid.compared and uuid.bits == [63, 63]
    try:
        ChunkReader(None, columns, ["name", "n"], 4, lambda: None, {"n": upstream["n"]})
    except ValueError as e:
        assert "name" in str(e)
    else:
        raise AssertionError("a compared key column without its upstream type was taken")


def _part(keys: list[int], full: bool = False) -> _Part:
    rows = pa.table({"_c0": pa.array([str(k) for k in keys], pa.string()),
                     "_c1": pa.array(["x"] * len(keys), pa.string())})
    return _Part(rows, [pa.array(keys, pa.int64()), rows.column(1).combine_chunks()], full)


def test_parts_are_cut_at_the_first_full_part_and_at_the_row_limit():
    r = _reader("bigint")
    rows, values, nxt, done = r._assemble([_part([1, 2]), _part([10, 11]), _part([20])], 30, 25, 100, 1)
    assert rows.num_rows == 5 and nxt == (30,) and done, "whole parts past the greatest key: the last chunk"
    rows, values, nxt, done = r._assemble([_part([1, 2]), _part([10, 11], full=True), _part([20])], 30, 99, 100, 1)
    assert rows.num_rows == 4 and nxt == (12,) and not done, "a part stopped by its LIMIT ends the chunk"
    rows, values, nxt, done = r._assemble([_part([1, 2]), _part([10, 11, 12]), _part([20])], 30, 99, 4, 1)
    assert rows.num_rows == 4 and nxt == (12,) and not done, "the chunk's row limit"
    assert values is not None and values[0].to_pylist() == [1, 2, 10, 11]
    assert r.keys_per_row == (12 - 1) / 4
    rows, values, nxt, done = r._assemble([_part([1, 2]), _part([5])], 9, 99, 100, 1)
    assert rows.num_rows == 3 and nxt == (9,) and not done, "the parts' range ends before the greatest key"


def test_a_transaction_is_visible_unless_running_or_begun_after_the_snapshot():
    from sparkwave.connectors.postgres_cdc_backfill import visible

    snapshot = "100:120:103,110"
    assert visible(snapshot, 99) and visible(snapshot, 104) and visible(snapshot, 119)
    assert not visible(snapshot, 103) and not visible(snapshot, 110) and not visible(snapshot, 120)
    assert not visible(snapshot, 5000)
    wrapped = f"{(1 << 32) + 10}:{(1 << 32) + 20}:"  # 64-bit xids past a wraparound; pgoutput's 32 bits
    assert visible(wrapped, 15) and visible(wrapped, (1 << 32) - 3) and not visible(wrapped, 21)


def test_a_chunk_read_ahead_is_taken_only_for_its_plan_and_cut_to_the_room_left():
    from sparkwave.connectors.postgres_cdc_backfill import Chunk, Prefetch

    r = _reader("bigint")
    part = _part([3, 4, 7, 9])
    prefetch = Prefetch(r, lambda: None)
    prefetch._result = ((3,), 500, Chunk(part.rows, part.values, (12,), 900, False))
    assert prefetch.take((3,), 400, 10) is None, "another stream start: another plan's"
    prefetch._result = ((3,), 500, Chunk(part.rows, part.values, (12,), 900, True))
    chunk = prefetch.take((3,), 500, 3)
    assert chunk is not None and chunk.rows.num_rows == 3 and chunk.next == (8,) and not chunk.done
    assert chunk.wal == 900 and chunk.values is not None and chunk.values[0].to_pylist() == [3, 4, 7]
    assert prefetch.take((3,), 500, 3) is None, "taken once"
