"""The Nexmark tables and queries in RisingWave's SQL form, shared by the demo, the tests and the
benchmarks. The queries follow RisingWave's `nexmark_q*` views; q3 compares states in upper case, as
Flink's original does, because this generator's states are upper case."""

from __future__ import annotations


def tables_sql(bids_per_second: int = 2300, event_gap_ns: int = 100_000) -> str:
    """person / auction / bid at Nexmark's 1 : 3 : 46 proportions."""
    person, auction = max(1, bids_per_second // 46), max(1, bids_per_second * 3 // 46)
    common = f"nexmark.min.event.gap.in.ns = '{event_gap_ns}'"
    return f"""
CREATE TABLE person (id bigint, name varchar, email_address varchar, credit_card varchar, city varchar,
    state varchar, date_time timestamp, extra varchar, PRIMARY KEY (id))
    WITH (connector = 'nexmark', nexmark.table.type = 'person', nexmark.rows.per.second = '{person}', {common});
CREATE TABLE auction (id bigint, item_name varchar, description varchar, initial_bid bigint, reserve bigint,
    date_time timestamp, expires timestamp, seller bigint, category bigint, extra varchar, PRIMARY KEY (id))
    WITH (connector = 'nexmark', nexmark.table.type = 'auction', nexmark.rows.per.second = '{auction}', {common});
CREATE TABLE bid (auction bigint, bidder bigint, price bigint, channel varchar, url varchar,
    date_time timestamp, extra varchar)
    WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.rows.per.second = '{bids_per_second}',
          {common});
"""


QUERIES = {
    "q0": "SELECT auction, bidder, price, date_time FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
    "q2": "SELECT auction, price FROM bid "
          "WHERE auction = 1007 OR auction = 1020 OR auction = 2001 OR auction = 2019 OR auction = 2087",
    "q3": """SELECT P.name, P.city, P.state, A.id
        FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
        WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')""",
    "q4": """SELECT Q.category, AVG(Q.final) AS avg
        FROM (SELECT MAX(B.price) AS final, A.category
              FROM auction A, bid B
              WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
              GROUP BY A.id, A.category) Q
        GROUP BY Q.category""",
    "q5": """SELECT AuctionBids.auction, AuctionBids.num
        FROM (SELECT bid.auction, count(*) AS num, window_start AS starttime
              FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
              GROUP BY window_start, bid.auction) AS AuctionBids
        JOIN (SELECT max(CountBids.num) AS maxn, CountBids.starttime_c
              FROM (SELECT count(*) AS num, window_start AS starttime_c
                    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
                    GROUP BY bid.auction, window_start) AS CountBids
              GROUP BY CountBids.starttime_c) AS MaxBids
        ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn""",
    "q7": """SELECT B.auction, B.price, B.bidder, B.date_time
        FROM bid B
        JOIN (SELECT MAX(price) AS maxprice, window_end AS date_time
              FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
              GROUP BY window_end) B1 ON B.price = B1.maxprice
        WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time""",
    "q8": """SELECT P.id, P.name, P.starttime
        FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
              FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
              GROUP BY id, name, window_start, window_end) P
        JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
              FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
              GROUP BY seller, window_start, window_end) A
        ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
    "q9": """SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category,
            auction, bidder, price, bid_date_time
        FROM (SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
                     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
              FROM auction A, bid B
              WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) AS tmp
        WHERE rownum <= 1""",
}
