-- SQLAlchemy 2 (psycopg 3): sqlalchemy_connect
show standard_conforming_strings
