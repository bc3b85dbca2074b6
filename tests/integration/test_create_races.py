"""Races of a CREATE with a DROP or a CREATE of the same name (found in issue 47's review): the
relation that registers keeps its folder; and a date literal no day has is NULL, as in Spark."""

from __future__ import annotations

import threading

from deltalake import DeltaTable

from sparkwave.core.errors import CatalogError


def test_a_create_racing_a_drop_of_its_name_keeps_its_delta_tables(session, monkeypatch):
    """DROP m commits its catalog transaction, then (before it forgets m's tables and removes m's
    folder) another session's CREATE m passes `_exists`, makes m's Delta tables and registers. The
    DROP's `remove_tree` must not take the new m's folder with it. Either outcome is right: the
    CREATE refused (m is still being dropped), or waiting for the DROP, or registered with its
    Delta tables intact."""
    s = session
    s.sql("CREATE TABLE t (k INT PRIMARY KEY, a INT)")
    s.sql("INSERT INTO t VALUES (1, 2), (3, 4)")
    s.flush()
    s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, a FROM t")
    s.flush()
    s.sql("SET background_ddl = true")
    started: list[int] = []
    monkeypatch.setattr(s.creating, "start", started.append)  # the new m's job stays put: no noise
    real_forget, errors, threads = s.rt.forget, [], []

    def create_again() -> None:
        try:
            s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, a + 1 AS b FROM t")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def forget(name: str) -> None:  # the DROP, between its catalog transaction and its folder removal
        if name == "m" and not threads:
            threads.append(threading.Thread(target=create_again))
            threads[0].start()
            threads[0].join(timeout=5)  # one that waits for the lock this DROP holds is joined below
        real_forget(name)

    monkeypatch.setattr(s.rt, "forget", forget)
    s.sql("DROP MATERIALIZED VIEW m")
    monkeypatch.setattr(s.rt, "forget", real_forget)
    threads[0].join()
    if errors:  # refused while m is being dropped: fine, if it says so
        assert all(isinstance(e, CatalogError) and "'m'" in str(e) for e in errors), errors
        return
    assert started, "the second CREATE did not register"
    rel = s.catalog.relation("m")
    assert rel is not None and rel.state == "creating"
    stored = s.rt.stored(rel)
    assert DeltaTable.is_deltatable(str(stored.log_path)), f"the new m's Delta log is gone: {stored.log_path}"
    assert DeltaTable.is_deltatable(str(stored.base_path)), f"the new m's base table is gone: {stored.base_path}"


def test_a_create_that_loses_the_race_for_its_name_leaves_the_winners_folder(session, monkeypatch):
    """Two sessions CREATE m at once: both pass `_exists` and make (idempotently) m's Delta tables;
    the second to register is refused ("already exists"), and its `_new_folder` clean-up must not
    remove the folder of the m that did register."""
    s = session
    s.sql("CREATE TABLE t (k INT PRIMARY KEY, a INT)")
    s.sql("INSERT INTO t VALUES (1, 2), (3, 4)")
    s.flush()
    s.sql("SET background_ddl = true")
    started: list[int] = []
    monkeypatch.setattr(s.creating, "start", started.append)  # the winner's job stays put: no noise
    real_register, errors, threads = s.ddl._register_mv, [], []

    def create_other() -> None:
        try:
            s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, a + 1 AS b FROM t")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def register(*args, **kwargs):  # the first CREATE, its folder made, about to register
        if not threads:
            threads.append(threading.Thread(target=create_other))
            threads[0].start()
            threads[0].join(timeout=5)  # one that waits for the lock this CREATE holds is joined below
        return real_register(*args, **kwargs)

    monkeypatch.setattr(s.ddl, "_register_mv", register)
    try:
        s.sql("CREATE MATERIALIZED VIEW m AS SELECT k, a FROM t")
    except CatalogError as e:
        assert "already exists" in str(e)
    threads[0].join()
    assert all(isinstance(e, CatalogError) and "already exists" in str(e) for e in errors), errors
    rel = s.catalog.relation("m")
    assert rel is not None and started, "the winner did not register"
    stored = s.rt.stored(rel)
    assert DeltaTable.is_deltatable(str(stored.log_path)), f"the registered m's Delta log is gone: {stored.log_path}"


def test_an_impossible_date_literal_in_a_small_epochs_filter_is_null_as_in_spark(session):
    """Spark (ANSI off) reads CAST('1995-02-30' AS DATE) as NULL; the Arrow evaluator's literal
    folding (`arrow_casts.cast_text_literal`) must refuse it (or give NULL), not raise ValueError
    out of the MV's step."""
    s = session
    s.sql("CREATE TABLE t (k INT PRIMARY KEY, d DATE)")
    s.sql("CREATE MATERIALIZED VIEW m AS SELECT k FROM t WHERE d < CAST('1995-02-30' AS DATE)")
    s.sql("INSERT INTO t VALUES (1, DATE '1990-01-01'), (2, DATE '2000-01-01')")
    s.flush()
    rows = s.sql("SELECT * FROM m").collect()
    assert rows == []
    assert s.catalog.relation("m").state == "created"
