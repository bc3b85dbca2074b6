"""Run every benchmark and print its figures (copy them into bench/RESULTS.md)."""

from __future__ import annotations

from bench import (
    bench_backfill,
    bench_barrier,
    bench_big_epoch,
    bench_cluster,
    bench_connect,
    bench_create_small,
    bench_dataflow,
    bench_delta_commit,
    bench_delta_source,
    bench_demo_latency,
    bench_dml,
    bench_event_time,
    bench_iceberg_sink,
    bench_integrity,
    bench_kafka,
    bench_long_run,
    bench_many_mvs,
    bench_peers,
    bench_server,
    bench_sinks,
    bench_stateful_backfill,
    bench_storage,
    bench_throughput,
)

if __name__ == "__main__":
    for b in (bench_barrier, bench_demo_latency, bench_dml, bench_throughput, bench_storage, bench_backfill,
              bench_dataflow, bench_stateful_backfill, bench_long_run, bench_kafka, bench_sinks, bench_peers,
              bench_big_epoch, bench_integrity, bench_server, bench_many_mvs, bench_delta_commit, bench_create_small,
              bench_event_time, bench_delta_source, bench_iceberg_sink, bench_cluster, bench_connect):
        b.main()
