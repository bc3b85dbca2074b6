-- psql 18 -E, server_version 18.6: \d totals
SELECT true as sametable, conname,
  pg_catalog.pg_get_constraintdef(r.oid, true) as condef,
  conrelid::pg_catalog.regclass AS ontable
FROM pg_catalog.pg_constraint r
WHERE r.conrelid = '{oid:totals}' AND r.contype = 'f'
     AND conparentid = 0
ORDER BY conname
