-- pandas.read_sql via SQLAlchemy: the user query itself (not a catalog query)
select * from orders
