-- psql 18 -E, server_version 13.14.0: \dS pg_class
SELECT conname, conrelid::pg_catalog.regclass AS ontable,
       pg_catalog.pg_get_constraintdef(oid, true) AS condef
  FROM pg_catalog.pg_constraint c
 WHERE confrelid IN (SELECT pg_catalog.pg_partition_ancestors('1259')
                     UNION ALL VALUES ('1259'::pg_catalog.regclass))
       AND contype = 'f' AND conparentid = 0
ORDER BY conname;
