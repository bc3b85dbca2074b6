-- Grafana PostgreSQL data source: a table's columns (reconstructed from Grafana's source, not captured)
SELECT quote_ident(column_name) AS "column", data_type AS "type" FROM information_schema.columns WHERE quote_ident(table_name) = 'orders' ORDER BY ordinal_position
