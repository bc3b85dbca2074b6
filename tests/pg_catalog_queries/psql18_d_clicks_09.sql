-- psql 18 -E, server_version 18.6: \d clicks
SELECT c.oid::pg_catalog.regclass
FROM pg_catalog.pg_class c, pg_catalog.pg_inherits i
WHERE c.oid = i.inhparent AND i.inhrelid = '{oid:clicks}'
  AND c.relkind != 'p' AND c.relkind != 'I'
ORDER BY inhseqno;
