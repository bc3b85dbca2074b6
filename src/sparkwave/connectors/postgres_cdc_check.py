"""The upstream of a postgres-cdc table at CREATE: its columns checked against the declared ones
(also those of a Relation message in the stream), and the publication and slot it reads, checked
or made.

A column's type is compared by its resolved type name: a domain by its base type (recursively), an
enum as `enum` (its text output is its label: a varchar). pgoutput never sends a generated column
(`pg_attribute.attgenerated`; PostgreSQL 18 only where the publication sets
publish_generated_columns, which is refused), so such a column need not be declared, and may not be
as a plain column: its value would come from the backfill and never from the stream. A publication
must publish every kind of change of the whole table, or the table silently parts from upstream."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

from sparkwave.connectors.postgres_cdc_values import suggested, takes
from sparkwave.core.errors import SqlError
from sparkwave.core.schema import SqlType

_TYPE = ("WITH RECURSIVE d(oid, typname, typtype, typbasetype, depth) AS ("
         "SELECT oid, typname, typtype, typbasetype, 0 FROM pg_type WHERE oid = %s UNION ALL "
         "SELECT t.oid, t.typname, t.typtype, t.typbasetype, d.depth + 1 FROM pg_type t "
         "JOIN d ON t.oid = d.typbasetype "
         "WHERE d.typtype = 'd' AND d.depth < 32) "
         "SELECT CASE WHEN typtype = 'e' THEN 'enum' ELSE typname END FROM d ORDER BY depth DESC LIMIT 1")


def type_name(conn: Any, oid: int) -> str:
    """The type name a column of type `oid` is compared by: a domain's base type, 'enum' for an enum."""
    row = conn.execute(_TYPE, (oid,)).fetchone()
    return str(oid) if row is None else str(row[0])


class KeyColumn(NamedTuple):
    """A key column upstream: the type it is compared by (`type_name`), the type its text form is cast
    to (`key_columns`), and its collation (schema, name) if any."""

    type: str
    cast: str
    collation: tuple[str, str] | None


# The type a key's text is cast to: a domain's base type (no CHECK to fail, no collation of its own), without
# the column's modifier (which a later ALTER may widen: a cast would truncate); `character` and `bit` alone
# mean a length of 1, so their unbounded forms.
_CAST = ("SELECT CASE typname WHEN 'bpchar' THEN 'pg_catalog.bpchar' WHEN 'bit' THEN 'pg_catalog.varbit' "
         "ELSE format_type(oid, NULL) END FROM pg_type WHERE oid = %s")


def key_columns(conn: Any, regclass: str, key: list[str]) -> dict[str, KeyColumn]:
    """The upstream key columns' types and collations (the backfill compares keys by them)."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid, cn.nspname, co.collname "
        "FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation "
        "LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace "
        "WHERE a.attrelid = to_regclass(%s) AND a.attname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        (regclass, key)).fetchall()
    out = {}
    for name, oid, nsp, coll in rows:
        cast = conn.execute(_CAST, (_base_type(conn, int(oid)),)).fetchone()[0]
        collation = None if coll is None else (str(nsp), str(coll))
        out[str(name)] = KeyColumn(type_name(conn, int(oid)), str(cast), collation)
    return out


def _base_type(conn: Any, oid: int) -> int:
    for _ in range(32):  # domains over domains
        row = conn.execute("SELECT typtype, typbasetype FROM pg_type WHERE oid = %s", (oid,)).fetchone()
        if row is None or row[0] != "d":
            break
        oid = int(row[1])
    return oid


def upstream_columns(conn: Any, regclass: str) -> list[tuple[str, int, bool, bool]]:
    """The table's columns: (name, type oid, in the primary key, generated upstream)."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid, coalesce(a.attnum = ANY(i.indkey), false), a.attgenerated <> '' "
        "FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (regclass,)).fetchall()
    return [(str(n), int(t), bool(k), bool(g)) for n, t, k, g in rows]


def column_problems(declared: dict[str, SqlType], computed: AbstractSet[str], upstream: list[tuple[str, str]],
                    generated: AbstractSet[str] = frozenset()) -> list[str]:
    """What differs between the upstream columns (name, resolved type) and the declared ones read
    from upstream; `computed`: the table's own generated columns (never read); `generated`: the
    upstream columns that are generated there (never sent)."""
    problems = []
    for name, typ in upstream:
        if name in computed:
            continue
        if name in generated:
            if name in declared:
                problems.append(f"column {name!r} is a generated column upstream, which pgoutput does not send: "
                                f"leave it out, or declare it as a generated column here ({name} "
                                f"{suggested(typ)} AS <expression>)")
        elif name not in declared:
            problems.append(f"column {name!r} ({typ}) is not declared (add {name} {suggested(typ)})")
        elif not takes(declared[name], typ):
            problems.append(f"column {name!r} is {typ} upstream, declared {declared[name]} "
                            f"(declare {suggested(typ)})")
    names = {n for n, _ in upstream}
    problems += [f"column {n!r} is not upstream" for n in declared if n not in names]
    return problems


def publication_problems(conn: Any, publication: str, regclass: str) -> list[str]:
    """Why an existing publication cannot feed the table: changes it does not publish, a row filter
    or a column list for the table, generated columns published. Read as JSON: the columns of
    pg_publication and pg_publication_rel differ between PostgreSQL versions."""
    row = conn.execute("SELECT to_jsonb(p) FROM pg_publication p WHERE pubname = %s", (publication,)).fetchone()
    if row is None:
        return []
    pub: dict[str, Any] = row[0]
    problems = []
    missing = [kind for kind in ("insert", "update", "delete", "truncate") if not pub.get(f"pub{kind}", True)]
    if missing:
        problems.append(f"it does not publish {', '.join(missing)} (ALTER PUBLICATION {publication} SET (publish = "
                        "'insert, update, delete, truncate'))")
    if pub.get("pubgencols", "n") not in ("n", False, None):
        problems.append(f"it publishes generated columns (ALTER PUBLICATION {publication} SET "
                        "(publish_generated_columns = none))")
    rel = conn.execute("SELECT to_jsonb(r) FROM pg_publication_rel r WHERE r.prpubid = %s AND r.prrelid = "
                       "to_regclass(%s)", (pub["oid"], regclass)).fetchone()
    if rel is not None and rel[0].get("prqual") is not None:
        problems.append("it has a row filter (WHERE) for the table, so changes of other rows are not sent")
    if rel is not None and rel[0].get("prattrs") is not None:
        problems.append("it has a column list for the table, so the other columns are not sent")
    return problems


def publish(conn: Any, where: str, publication: str, table: Any, upstream: tuple[str, str]) -> bool:
    """Makes the publication of `table` (an Identifier) if absent (True: made); an existing one must
    publish every change of the whole table."""
    from psycopg import sql
    qualified, regclass = ".".join(upstream), table.as_string(conn)
    if conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                    (publication, *upstream)).fetchone():
        if problems := publication_problems(conn, publication, regclass):
            raise SqlError(f"{where}: publication {publication!r} cannot feed a CDC table of {qualified}: "
                           + "; ".join(problems))
        return False
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone():
        raise SqlError(f"{where}: publication {publication!r} does not publish {qualified}; "
                       f"ALTER PUBLICATION {publication} ADD TABLE {qualified}, or name another")
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(publication), table))
    return True


def slot_position(conn: Any, where: str, slot: str, named: bool, database: str) -> tuple[int, bool]:
    """The slot's position, the slot made if absent (True: made). A default-named slot that exists is
    refused (another warehouse's?); a named one is read from its position."""
    row = conn.execute("SELECT plugin, database, (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        made = conn.execute("SELECT (lsn - '0/0')::bigint FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                            (slot,)).fetchone()
        return int(made[0]), True
    if not named:
        raise SqlError(f"{where}: replication slot {slot!r} already exists (another table's?); name the slot to read "
                       "with slot.name = '...' (an existing one is read from its position)")
    if row[0] != "pgoutput" or row[1] != database:
        raise SqlError(f"{where}: replication slot {slot!r} exists for plugin {row[0]!r} in database {row[1]!r}; name "
                       f"another slot.name (this one needs pgoutput in {database!r})")
    return int(row[2]), False


def estimate(conn: Any, table: Any) -> int:
    """The upstream's rows as the planner estimates them (`reltuples`); counted where the table was
    never analyzed (-1), which only a new, so far small, table is."""
    from psycopg import sql
    guess = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                         (table.as_string(conn),)).fetchone()
    if guess is not None and guess[0] is not None and int(guess[0]) >= 0:
        return int(guess[0])
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0])
