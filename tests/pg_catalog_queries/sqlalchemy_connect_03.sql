-- SQLAlchemy 2 (psycopg 3): sqlalchemy_connect
show transaction isolation level
