-- SQLAlchemy 2 (psycopg 3): get_indexes
SELECT pg_catalog.pg_opclass.oid, pg_catalog.pg_opclass.opcname 
	FROM pg_catalog.pg_opclass 
	WHERE NOT pg_catalog.pg_opclass.opcdefault
