-- SQLAlchemy 2 (psycopg 3): sqlalchemy_connect
-- params: ["hstore"]
SELECT
	    typname AS name, oid, typarray AS array_oid,
	    oid::regtype::text AS regtype, typdelim AS delimiter
	FROM pg_type t
	WHERE t.oid = to_regtype($1)
	ORDER BY t.oid
