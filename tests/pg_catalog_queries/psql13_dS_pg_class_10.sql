-- psql 18 -E, server_version 13.14.0: \dS pg_class
SELECT c.oid::pg_catalog.regclass
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhparent AND i.inhrelid = '1259'
  AND c.relkind != 'p' AND c.relkind != 'I'
ORDER BY inhseqno;
