"""`Catalog.changes()`, the mark under which `frontend/reads.py` keeps what it read of the catalog:
it holds while nothing is written and moves with every write, by this connection or another (a
second catalog on the same file, as `sparkwave` commands open beside a server), even one that
writes a value the catalog already had. No Spark session."""

from __future__ import annotations

from sparkwave.core.catalog import Catalog


def test_the_mark_moves_with_every_write_and_only_then(tmp_path) -> None:
    path = tmp_path / "wh" / "catalog.db"
    path.parent.mkdir()
    catalog = Catalog(path)
    other = Catalog(path, create=False)
    try:
        mark = catalog.changes()
        assert catalog.setting("x") is None and catalog.committed_epoch() == 0
        assert catalog.changes() == mark  # reads move nothing

        catalog.set_setting("x", "1")
        assert (moved := catalog.changes()) != mark
        catalog.set_setting("x", "1")  # the same value again: still a write
        assert (again := catalog.changes()) != moved

        other.set_setting("y", "2")  # another connection's commit
        assert (theirs := catalog.changes()) != again
        assert catalog.changes() == theirs
        assert catalog.setting("y") == "2"
    finally:
        other.close()
        catalog.close()
