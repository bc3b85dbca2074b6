"""Job progress as users see it, from the catalog alone (no Spark): per upstream and per chunk, and
for a job left mid-snapshot by an older version that counted rows summed over its upstreams."""

from __future__ import annotations

from sparkwave.core.catalog import Catalog, Relation
from sparkwave.core.schema import Column, Schema, SqlType
from sparkwave.meta.progress import job_infos

SCHEMA = Schema((Column("k", SqlType("int")),), ("k",))


def creating_join(tmp_path) -> tuple[Catalog, int]:
    catalog = Catalog(tmp_path / "catalog.db")
    rel = Relation("j", "mv", SCHEMA, {"upstreams": ["a", "b"]}, 7, state="creating")
    with catalog.transaction() as db:
        job_id = catalog.add_relation(db, rel, "snapshot", "a")
    return catalog, job_id


def test_progress_per_upstream_follows_the_vnodes_read(tmp_path):
    catalog, job_id = creating_join(tmp_path)
    counts = {"a": [3] * 256, "b": [1] * 256}
    catalog.set_job_counts(job_id, counts)
    catalog.start_chunk(job_id, 0, 100, 400)
    (info,) = job_infos(catalog)
    assert (info.rows_done, info.rows_total) == (0, 1024)
    assert [(u.relation, u.rows_done, u.rows_total) for u in info.upstreams] == [("a", 0, 768), ("b", 0, 256)]
    assert [(c.lo, c.hi, c.rows, c.state, c.attempts) for c in info.chunks] == [(0, 100, 400, "reading", 1)]
    catalog.start_chunk(job_id, 0, 100, 400)  # re-read after a crash
    with catalog.transaction() as db:
        db.execute("UPDATE job_chunks SET state = 'done' WHERE job = ?", (job_id,))
        db.execute("UPDATE jobs SET next_vnode = 100, rows_done = 400 WHERE id = ?", (job_id,))
    (info,) = job_infos(catalog)
    assert [(u.relation, u.rows_done) for u in info.upstreams] == [("a", 300), ("b", 100)]
    assert [(c.state, c.attempts) for c in info.chunks] == [("done", 2)]
    assert str(info.upstreams[0]) == "a 300/768"


def test_counts_summed_over_upstreams_by_an_older_version_are_not_credited_to_one(tmp_path):
    catalog, job_id = creating_join(tmp_path)
    with catalog.transaction() as db:  # as the previous version stored them, in a catalog at version 1
        db.execute("UPDATE jobs SET vnode_rows = ?, rows_total = 1024, next_vnode = 128 WHERE id = ?",
                   ("[" + ", ".join(["4"] * 256) + "]", job_id))
        db.execute("PRAGMA user_version = 1")
    catalog.close()
    catalog = Catalog(tmp_path / "catalog.db")  # migrated on opening
    job = catalog.job(job_id)
    assert job is not None and sum(map(sum, job.vnode_rows.values())) == 1024  # resumption sees every row
    (info,) = job_infos(catalog)
    assert info.rows_total == 1024 and info.upstreams == ()
