-- SQLAlchemy 2 (psycopg 3): get_table_comment
-- params: ["0", "pg_class", "r", "p", "f", "v", "m", "pg_catalog", "orders"]
SELECT pg_catalog.pg_class.relname, pg_catalog.pg_description.description 
	FROM pg_catalog.pg_class LEFT OUTER JOIN pg_catalog.pg_description ON pg_catalog.pg_class.oid = pg_catalog.pg_description.objoid AND pg_catalog.pg_description.objsubid = $1::INTEGER AND pg_catalog.pg_description.classoid = CAST($2 AS REGCLASS) JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace 
	WHERE pg_catalog.pg_class.relkind = ANY (ARRAY[$3::VARCHAR, $4::VARCHAR, $5::VARCHAR, $6::VARCHAR, $7::VARCHAR]) AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != $8::VARCHAR AND pg_catalog.pg_class.relname IN ($9::VARCHAR)
