-- SQLAlchemy 2 (psycopg 3): sqlalchemy_connect
select pg_catalog.version()
