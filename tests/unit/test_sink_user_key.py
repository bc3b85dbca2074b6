"""A sink's `primary_key` chosen by the user that is not unique in the MV (two MV rows, one sink
key, in one delivery): each keyed target keeps one row per key, the delivery's last, as RisingWave
does, instead of two rows (PostgreSQL, Iceberg) or a MERGE that fails at every retry (Delta)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkwave.connectors import make_sink
from sparkwave.connectors.sink import UPSERT, Position, SinkSpec, deletes_and_upserts
from sparkwave.core.chunk import VNODES, Op
from sparkwave.core.schema import Column, SqlType

COLUMNS = (Column("id", SqlType("int")), Column("grp", SqlType("varchar")), Column("n", SqlType("bigint")))


def change(rows: list[tuple[int, int, str | None, int]]) -> pa.Table:
    schema = pa.schema([pa.field("_op", pa.int8()), *[pa.field(c.name, c.type.arrow) for c in COLUMNS]])
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


# MV rows id 1 and 2 share grp 'x', the sink's key; grp NULL twice too; then id 1 leaves
FIRST = change([(Op.INSERT, 1, "x", 10), (Op.INSERT, 2, "x", 20), (Op.INSERT, 3, "y", 30),
                (Op.INSERT, 4, None, 40), (Op.INSERT, 5, None, 50)])
SECOND = change([(Op.DELETE, 3, "y", 30), (Op.INSERT, 6, "y", 60), (Op.UPDATE_INSERT, 2, "x", 21)])
WANT = [("x", 21), ("y", 60), (None, 50)]


def test_the_rows_to_write_hold_the_last_row_of_each_key() -> None:
    gone, new = deletes_and_upserts(FIRST, UPSERT, ("grp",))
    assert gone.num_rows == 0
    assert new.select(["grp", "n"]).to_pylist() == [{"grp": "x", "n": 20}, {"grp": "y", "n": 30},
                                                   {"grp": None, "n": 50}]
    assert deletes_and_upserts(FIRST, UPSERT)[1].num_rows == 5  # without a key: every row, as before


def _delta(tmp_path) -> dict[str, str]:
    return {"connector": "deltalake", "location": str(tmp_path / "out")}


def _iceberg(tmp_path) -> dict[str, str]:
    return {"connector": "iceberg", "warehouse.path": str(tmp_path / "lake"), "database.name": "db",
            "table.name": "out", "catalog.uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "create_table_if_not_exists": "true"}


@pytest.mark.parametrize("options", [_delta, _iceberg], ids=["delta", "iceberg"])
def test_a_keyed_target_keeps_one_row_per_user_key(tmp_path, options) -> None:
    target = make_sink(SinkSpec("s", f"s-{uuid.uuid4().hex[:8]}", COLUMNS, ("grp",), UPSERT, options(tmp_path)))
    target.check()
    target.write(FIRST, Position(1, VNODES))
    target.write(SECOND, Position(2, VNODES))
    if options is _delta:
        rows = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    else:
        rows = target._connect().load_table(target.ident).scan().to_arrow().to_pylist()  # type: ignore[attr-defined]
    assert sorted(((r["grp"], r["n"]) for r in rows), key=str) == sorted(WANT, key=str)
