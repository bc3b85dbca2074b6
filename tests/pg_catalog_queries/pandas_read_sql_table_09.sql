-- SQLAlchemy 2 (psycopg 3): pandas_read_sql_table
SELECT pg_catalog.pg_opclass.oid, pg_catalog.pg_opclass.opcname 
	FROM pg_catalog.pg_opclass 
	WHERE NOT pg_catalog.pg_opclass.opcdefault
