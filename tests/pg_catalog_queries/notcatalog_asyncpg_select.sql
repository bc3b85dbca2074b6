-- asyncpg: a user query with casts (not a catalog query: sparkwave runs it)
select '{}'::json a, '{1}'::int4[] b, 'x'::varchar c, 1::oid d
