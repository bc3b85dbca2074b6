-- SQLAlchemy 2 (psycopg 3): get_schema_names
-- params: ["pg/_"]
SELECT pg_catalog.pg_namespace.nspname 
	FROM pg_catalog.pg_namespace 
	WHERE (pg_catalog.pg_namespace.nspname NOT LIKE $1::VARCHAR || '%' ESCAPE '/') ORDER BY pg_catalog.pg_namespace.nspname
