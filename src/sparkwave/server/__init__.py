"""`sparkwave serve`: the warehouse's owner as a server, reached over the PostgreSQL protocol."""
