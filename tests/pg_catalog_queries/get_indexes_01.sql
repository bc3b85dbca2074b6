-- SQLAlchemy 2 (psycopg 3): get_indexes
-- params: ["btree"]
SELECT pg_catalog.pg_am.oid, pg_catalog.pg_am.amname 
	FROM pg_catalog.pg_am 
	WHERE pg_catalog.pg_am.amname = $1::VARCHAR
