"""The emulated `pg_catalog` and `information_schema` tables: their columns and PostgreSQL types
(PostgreSQL 18's columns, so that what psql, SQLAlchemy, psycopg, asyncpg, JDBC and the BI tools
select exists). Tables sparkwave has nothing for are present and empty.

Arrays (`_text`, `int2vector`, `oidvector`, ...) are stored as JSON text in SQLite;
`pg_catalog_sql.py` translates subscripts, ANY, unnest and array_agg to JSON functions."""

from __future__ import annotations

_PG_CATALOG = {
    "pg_namespace": "oid oid, nspname name, nspowner oid, nspacl _text",
    "pg_class": (
        "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, relowner oid, relam oid, "
        "relfilenode oid, reltablespace oid, relpages int4, reltuples float4, relallvisible int4, "
        "relallfrozen int4, reltoastrelid oid, relhasindex bool, relisshared bool, relpersistence char, "
        "relkind char, relnatts int2, relchecks int2, relhasrules bool, relhastriggers bool, relhassubclass bool, "
        "relrowsecurity bool, relforcerowsecurity bool, relispopulated bool, relreplident char, "
        "relispartition bool, relrewrite oid, relfrozenxid text, relminmxid text, relacl _text, "
        "reloptions _text, relpartbound text"),
    "pg_attribute": (
        "attrelid oid, attname name, atttypid oid, attlen int2, attnum int2, attcacheoff int4, atttypmod int4, "
        "attndims int2, attbyval bool, attalign char, attstorage char, attcompression char, attnotnull bool, "
        "atthasdef bool, atthasmissing bool, attidentity char, attgenerated char, attisdropped bool, "
        "attislocal bool, attinhcount int2, attcollation oid, attstattarget int2, attacl _text, "
        "attoptions _text, attfdwoptions _text, attmissingval text"),
    "pg_type": (
        "oid oid, typname name, typnamespace oid, typowner oid, typlen int2, typbyval bool, typtype char, "
        "typcategory char, typispreferred bool, typisdefined bool, typdelim char, typrelid oid, "
        "typsubscript text, typelem oid, typarray oid, typinput text, typoutput text, typreceive text, "
        "typsend text, typmodin text, typmodout text, typanalyze text, typalign char, typstorage char, "
        "typnotnull bool, typbasetype oid, typtypmod int4, typndims int4, typcollation oid, typdefaultbin text, "
        "typdefault text, typacl _text"),
    "pg_index": (
        "indexrelid oid, indrelid oid, indnatts int2, indnkeyatts int2, indisunique bool, "
        "indnullsnotdistinct bool, indisprimary bool, indisexclusion bool, indimmediate bool, "
        "indisclustered bool, indisvalid bool, indcheckxmin bool, indisready bool, indislive bool, "
        "indisreplident bool, indkey int2vector, indcollation oidvector, indclass oidvector, "
        "indoption int2vector, indexprs text, indpred text"),
    "pg_constraint": (
        "oid oid, conname name, connamespace oid, contype char, condeferrable bool, condeferred bool, "
        "conenforced bool, convalidated bool, conrelid oid, contypid oid, conindid oid, conparentid oid, "
        "confrelid oid, confupdtype char, confdeltype char, confmatchtype char, conislocal bool, "
        "coninhcount int2, connoinherit bool, conperiod bool, conkey _int2, confkey _int2, conpfeqop _oid, "
        "conppeqop _oid, conffeqop _oid, confdelsetcols _int2, conexclop _oid, conbin text"),
    "pg_attrdef": "oid oid, adrelid oid, adnum int2, adbin text",
    "pg_description": "objoid oid, classoid oid, objsubid int4, description text",
    "pg_shdescription": "objoid oid, classoid oid, description text",
    "pg_database": (
        "oid oid, datname name, datdba oid, encoding int4, datlocprovider char, datistemplate bool, "
        "datallowconn bool, dathasloginevt bool, datconnlimit int4, datfrozenxid text, datminmxid text, "
        "dattablespace oid, datcollate text, datctype text, datlocale text, daticurules text, "
        "datcollversion text, datacl _text"),
    "pg_roles": (
        "rolname name, rolsuper bool, rolinherit bool, rolcreaterole bool, rolcreatedb bool, rolcanlogin bool, "
        "rolreplication bool, rolconnlimit int4, rolpassword text, rolvaliduntil timestamptz, "
        "rolbypassrls bool, rolconfig _text, oid oid"),
    "pg_user": (
        "usename name, usesysid oid, usecreatedb bool, usesuper bool, userepl bool, usebypassrls bool, "
        "passwd text, valuntil timestamptz, useconfig _text"),
    "pg_auth_members": (
        "oid oid, roleid oid, member oid, grantor oid, admin_option bool, inherit_option bool, set_option bool"),
    "pg_settings": (
        "name text, setting text, unit text, category text, short_desc text, extra_desc text, context text, "
        "vartype text, source text, min_val text, max_val text, enumvals _text, boot_val text, reset_val text, "
        "sourcefile text, sourceline int4, pending_restart bool"),
    "pg_am": "oid oid, amname name, amhandler text, amtype char",
    "pg_inherits": "inhrelid oid, inhparent oid, inhseqno int4, inhdetachpending bool",
    "pg_matviews": (
        "schemaname name, matviewname name, matviewowner name, tablespace name, hasindexes bool, "
        "ispopulated bool, definition text"),
    "pg_views": "schemaname name, viewname name, viewowner name, definition text",
    "pg_tables": (
        "schemaname name, tablename name, tableowner name, tablespace name, hasindexes bool, hasrules bool, "
        "hastriggers bool, rowsecurity bool"),
    "pg_indexes": "schemaname name, tablename name, indexname name, tablespace name, indexdef text",
    "pg_proc": (
        "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, procost float4, prorows float4, "
        "provariadic oid, prosupport text, prokind char, prosecdef bool, proleakproof bool, proisstrict bool, "
        "proretset bool, provolatile char, proparallel char, pronargs int2, pronargdefaults int2, "
        "prorettype oid, proargtypes oidvector, proallargtypes _oid, proargmodes _char, proargnames _text, "
        "proargdefaults text, protrftypes _oid, prosrc text, probin text, prosqlbody text, proconfig _text, "
        "proacl _text"),
    "pg_collation": (
        "oid oid, collname name, collnamespace oid, collowner oid, collprovider char, collisdeterministic bool, "
        "collencoding int4, collcollate text, collctype text, colllocale text, collicurules text, "
        "collversion text"),
    "pg_enum": "oid oid, enumtypid oid, enumsortorder float4, enumlabel name",
    "pg_range": (
        "rngtypid oid, rngsubtype oid, rngmultitypid oid, rngcollation oid, rngsubopc oid, rngcanonical text, "
        "rngsubdiff text"),
    "pg_extension": (
        "oid oid, extname name, extowner oid, extnamespace oid, extrelocatable bool, extversion text, "
        "extconfig _oid, extcondition _text"),
    "pg_trigger": (
        "oid oid, tgrelid oid, tgparentid oid, tgname name, tgfoid oid, tgtype int2, tgenabled char, "
        "tgisinternal bool, tgconstrrelid oid, tgconstrindid oid, tgconstraint oid, tgdeferrable bool, "
        "tginitdeferred bool, tgnargs int2, tgattr int2vector, tgargs bytea, tgqual text, tgoldtable name, "
        "tgnewtable name"),
    "pg_policy": (
        "oid oid, polname name, polrelid oid, polcmd char, polpermissive bool, polroles _oid, polqual text, "
        "polwithcheck text"),
    "pg_statistic_ext": (
        "oid oid, stxrelid oid, stxname name, stxnamespace oid, stxowner oid, stxkeys int2vector, "
        "stxstattarget int2, stxkind _char, stxexprs text"),
    "pg_publication": (
        "oid oid, pubname name, pubowner oid, puballtables bool, pubinsert bool, pubupdate bool, "
        "pubdelete bool, pubtruncate bool, pubviaroot bool, pubgencols char"),
    "pg_publication_rel": "oid oid, prpubid oid, prrelid oid, prqual text, prattrs int2vector",
    "pg_publication_namespace": "oid oid, pnpubid oid, pnnspid oid",
    "pg_subscription": "oid oid, subdbid oid, subname name, subowner oid, subenabled bool, subpublications _text",
    "pg_sequence": (
        "seqrelid oid, seqtypid oid, seqstart int8, seqincrement int8, seqmax int8, seqmin int8, seqcache int8, "
        "seqcycle bool"),
    "pg_sequences": (
        "schemaname name, sequencename name, sequenceowner name, data_type regtype, start_value int8, "
        "min_value int8, max_value int8, increment_by int8, cycle bool, cache_size int8, last_value int8"),
    "pg_tablespace": "oid oid, spcname name, spcowner oid, spcacl _text, spcoptions _text",
    "pg_opclass": (
        "oid oid, opcmethod oid, opcname name, opcnamespace oid, opcowner oid, opcfamily oid, opcintype oid, "
        "opcdefault bool, opckeytype oid"),
    "pg_operator": (
        "oid oid, oprname name, oprnamespace oid, oprowner oid, oprkind char, oprcanmerge bool, "
        "oprcanhash bool, oprleft oid, oprright oid, oprresult oid, oprcom oid, oprnegate oid, oprcode text, "
        "oprrest text, oprjoin text"),
    "pg_aggregate": "aggfnoid text, aggkind char, aggnumdirectargs int2, aggtransfn text, aggfinalfn text",
    "pg_cast": "oid oid, castsource oid, casttarget oid, castfunc oid, castcontext char, castmethod char",
    "pg_conversion": (
        "oid oid, conname name, connamespace oid, conowner oid, conforencoding int4, contoencoding int4, "
        "conproc text, condefault bool"),
    "pg_language": (
        "oid oid, lanname name, lanowner oid, lanispl bool, lanpltrusted bool, lanplcallfoid oid, "
        "laninline oid, lanvalidator oid, lanacl _text"),
    "pg_depend": (
        "classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, refobjsubid int4, deptype char"),
    "pg_shdepend": (
        "dbid oid, classid oid, objid oid, objsubid int4, refclassid oid, refobjid oid, deptype char"),
    "pg_rewrite": (
        "oid oid, rulename name, ev_class oid, ev_type char, ev_enabled char, is_instead bool, ev_qual text, "
        "ev_action text"),
    "pg_rules": "schemaname name, tablename name, rulename name, definition text",
    "pg_event_trigger": (
        "oid oid, evtname name, evtevent name, evtowner oid, evtfoid oid, evtenabled char, evttags _text"),
    "pg_foreign_table": "ftrelid oid, ftserver oid, ftoptions _text",
    "pg_foreign_server": (
        "oid oid, srvname name, srvowner oid, srvfdw oid, srvtype text, srvversion text, srvacl _text, "
        "srvoptions _text"),
    "pg_foreign_data_wrapper": (
        "oid oid, fdwname name, fdwowner oid, fdwhandler oid, fdwvalidator oid, fdwacl _text, fdwoptions _text"),
    "pg_user_mapping": "oid oid, umuser oid, umserver oid, umoptions _text",
    "pg_user_mappings": (
        "umid oid, srvid oid, srvname name, umuser oid, usename name, umoptions _text"),
    "pg_db_role_setting": "setdatabase oid, setrole oid, setconfig _text",
    "pg_default_acl": "oid oid, defaclrole oid, defaclnamespace oid, defaclobjtype char, defaclacl _text",
    "pg_init_privs": "objoid oid, classoid oid, objsubid int4, privtype char, initprivs _text",
    "pg_partitioned_table": (
        "partrelid oid, partstrat char, partnatts int2, partdefid oid, partattrs int2vector, "
        "partclass oidvector, partcollation oidvector, partexprs text"),
    "pg_ts_config": "oid oid, cfgname name, cfgnamespace oid, cfgowner oid, cfgparser oid",
    "pg_ts_dict": "oid oid, dictname name, dictnamespace oid, dictowner oid, dicttemplate oid, dictinitoption text",
    "pg_ts_parser": "oid oid, prsname name, prsnamespace oid",
    "pg_ts_template": "oid oid, tmplname name, tmplnamespace oid",
    "pg_largeobject_metadata": "oid oid, lomowner oid, lomacl _text",
    "pg_stat_activity": (
        "datid oid, datname name, pid int4, leader_pid int4, usesysid oid, usename name, application_name text, "
        "client_addr text, client_hostname text, client_port int4, backend_start timestamptz, "
        "xact_start timestamptz, query_start timestamptz, state_change timestamptz, wait_event_type text, "
        "wait_event text, state text, backend_xid text, backend_xmin text, query_id int8, query text, "
        "backend_type text"),
    "pg_locks": (
        "locktype text, database oid, relation oid, page int4, tuple int2, virtualxid text, transactionid text, "
        "classid oid, objid oid, objsubid int2, virtualtransaction text, pid int4, mode text, granted bool, "
        "fastpath bool, waitstart timestamptz"),
    "pg_stat_user_tables": (
        "relid oid, schemaname name, relname name, seq_scan int8, seq_tup_read int8, idx_scan int8, "
        "idx_tup_fetch int8, n_tup_ins int8, n_tup_upd int8, n_tup_del int8, n_live_tup int8, n_dead_tup int8"),
    "pg_statio_user_tables": "relid oid, schemaname name, relname name, heap_blks_read int8, heap_blks_hit int8",
    "pg_timezone_names": "name text, abbrev text, utc_offset interval, is_dst bool",
    "pg_available_extensions": "name name, default_version text, installed_version text, comment text",
}

_INFORMATION_SCHEMA = {
    "schemata": (
        "catalog_name name, schema_name name, schema_owner name, default_character_set_catalog name, "
        "default_character_set_schema name, default_character_set_name name, sql_path text"),
    "tables": (
        "table_catalog name, table_schema name, table_name name, table_type text, "
        "self_referencing_column_name name, reference_generation text, user_defined_type_catalog name, "
        "user_defined_type_schema name, user_defined_type_name name, is_insertable_into text, is_typed text, "
        "commit_action text"),
    "columns": (
        "table_catalog name, table_schema name, table_name name, column_name name, ordinal_position int4, "
        "column_default text, is_nullable text, data_type text, character_maximum_length int4, "
        "character_octet_length int4, numeric_precision int4, numeric_precision_radix int4, numeric_scale int4, "
        "datetime_precision int4, interval_type text, interval_precision int4, character_set_catalog name, "
        "character_set_schema name, character_set_name name, collation_catalog name, collation_schema name, "
        "collation_name name, domain_catalog name, domain_schema name, domain_name name, udt_catalog name, "
        "udt_schema name, udt_name name, scope_catalog name, scope_schema name, scope_name name, "
        "maximum_cardinality int4, dtd_identifier name, is_self_referencing text, is_identity text, "
        "identity_generation text, identity_start text, identity_increment text, identity_maximum text, "
        "identity_minimum text, identity_cycle text, is_generated text, generation_expression text, "
        "is_updatable text"),
    "views": (
        "table_catalog name, table_schema name, table_name name, view_definition text, check_option text, "
        "is_updatable text, is_insertable_into text, is_trigger_updatable text, is_trigger_deletable text, "
        "is_trigger_insertable_into text"),
    "table_constraints": (
        "constraint_catalog name, constraint_schema name, constraint_name name, table_catalog name, "
        "table_schema name, table_name name, constraint_type text, is_deferrable text, initially_deferred text, "
        "enforced text, nulls_distinct text"),
    "key_column_usage": (
        "constraint_catalog name, constraint_schema name, constraint_name name, table_catalog name, "
        "table_schema name, table_name name, column_name name, ordinal_position int4, "
        "position_in_unique_constraint int4"),
    "constraint_column_usage": (
        "table_catalog name, table_schema name, table_name name, column_name name, constraint_catalog name, "
        "constraint_schema name, constraint_name name"),
    "referential_constraints": (
        "constraint_catalog name, constraint_schema name, constraint_name name, "
        "unique_constraint_catalog name, unique_constraint_schema name, unique_constraint_name name, "
        "match_option text, update_rule text, delete_rule text"),
    "check_constraints": "constraint_catalog name, constraint_schema name, constraint_name name, check_clause text",
    "routines": (
        "specific_catalog name, specific_schema name, specific_name name, routine_catalog name, "
        "routine_schema name, routine_name name, routine_type text, data_type text, routine_definition text"),
    "parameters": "specific_catalog name, specific_schema name, specific_name name, ordinal_position int4, "
                  "parameter_mode text, parameter_name name, data_type text",
    "sequences": (
        "sequence_catalog name, sequence_schema name, sequence_name name, data_type text, numeric_precision int4, "
        "start_value text, minimum_value text, maximum_value text, increment text, cycle_option text"),
    "triggers": (
        "trigger_catalog name, trigger_schema name, trigger_name name, event_manipulation text, "
        "event_object_catalog name, event_object_schema name, event_object_table name, action_statement text"),
    "character_sets": (
        "character_set_catalog name, character_set_schema name, character_set_name name, "
        "character_repertoire name, form_of_use name, default_collate_catalog name, default_collate_schema name, "
        "default_collate_name name"),
    "enabled_roles": "role_name name",
    "applicable_roles": "grantee name, role_name name, is_grantable text",
    "table_privileges": (
        "grantor name, grantee name, table_catalog name, table_schema name, table_name name, "
        "privilege_type text, is_grantable text, with_hierarchy text"),
    "column_privileges": (
        "grantor name, grantee name, table_catalog name, table_schema name, table_name name, column_name name, "
        "privilege_type text, is_grantable text"),
}


def _parse(spec: str) -> tuple[tuple[str, str], ...]:
    cols = []
    for part in spec.split(","):
        name, typ = part.split()
        cols.append((name, typ))
    return tuple(cols)


TABLES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "pg_catalog": {name: _parse(spec) for name, spec in _PG_CATALOG.items()},
    "information_schema": {name: _parse(spec) for name, spec in _INFORMATION_SCHEMA.items()},
}

_INTEGER_TYPES = frozenset({"oid", "bool", "int2", "int4", "int8"})


def sqlite_type(pg_type: str) -> str:
    """The declared SQLite type of a column: its affinity decides how `'16386'` compares with an oid."""
    if pg_type in _INTEGER_TYPES:
        return "INTEGER"
    if pg_type in ("float4", "float8"):
        return "REAL"
    return "TEXT"


def column_types() -> dict[str, dict[str, str]]:
    """Every catalog table's columns and their PostgreSQL type names, by table name (unqualified)."""
    out: dict[str, dict[str, str]] = {}
    for tables in TABLES.values():
        for name, cols in tables.items():
            out[name] = dict(cols)
    return out
