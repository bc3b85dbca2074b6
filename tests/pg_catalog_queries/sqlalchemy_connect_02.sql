-- SQLAlchemy 2 (psycopg 3): sqlalchemy_connect
select current_schema()
