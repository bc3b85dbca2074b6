-- psql 18 -E, server_version 13.14.0: \dS pg_class
SELECT true as sametable, conname,
  pg_catalog.pg_get_constraintdef(r.oid, true) as condef,
  conrelid::pg_catalog.regclass AS ontable
FROM pg_catalog.pg_constraint r
WHERE r.conrelid = '1259' AND r.contype = 'f'
     AND conparentid = 0
ORDER BY conname
