"""Tests on real Spark, Delta, SQLite, PostgreSQL and a Kafka-protocol broker, each of one subject."""
