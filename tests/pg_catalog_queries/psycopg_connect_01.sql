-- psycopg: psycopg_connect
select 1
