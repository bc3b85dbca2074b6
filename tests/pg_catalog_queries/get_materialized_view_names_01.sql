-- SQLAlchemy 2 (psycopg 3): get_materialized_view_names
-- params: ["m", "t", "pg_catalog"]
SELECT pg_catalog.pg_class.relname 
	FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace 
	WHERE pg_catalog.pg_class.relkind = ANY (ARRAY[$1::VARCHAR]) AND pg_catalog.pg_class.relpersistence != $2::VARCHAR AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != $3::VARCHAR
