"""Which path runs: every size threshold that chooses between the engine's evaluations of one
semantics, and the decisions made from them, in one place.

Each stateful operator has three evaluations (Arrow per epoch on the driver, Spark frames for a big
epoch, Spark from snapshots; `stream/operator.py`), and reads and writes have a driver path and a
Spark path (local relations, snapshots overlaid in Arrow, a Kafka range read by the driver). The
paths compute the same rows (`tests/integration/test_parity.py`); only their cost differs, and these functions
say which one a size calls for. Every layer asks here, so a threshold is defined once and a
decision is named where it is made. `big_epoch_rows` is a user setting (`meta/settings.py`): the
decisions that depend on it take its value. The figures behind the constants are in
bench/RESULTS.md."""

from __future__ import annotations

# A local relation (rows the driver hands Spark) is evaluated by Spark's optimizer on one driver
# thread, its rows coming back to Python one by one: past this many rows (the measured crossover of
# a project-filter frame is about 10k) a file scan on the executors wins.
LOCAL_ROWS = 8192
# A Kafka range of at most this many offsets is read by the driver itself: no Python worker, no job.
KAFKA_DRIVER_ROWS = LOCAL_ROWS
# Past this many bytes of Parquet, or of Arrow once decoded (repeated values compress well), a
# snapshot is read by Spark: the driver holds what it reads, a few times over while overlaying it.
LOCAL_SNAPSHOT_BYTES = 1 << 20
LOCAL_SNAPSHOT_MEMORY = 32 << 20
# A driver build (`Dataflow.build_local`, at most `big_epoch_rows` rows) holds its snapshots' rows
# anyway: it reads them with pyarrow up to these bounds (a log of many updates over few keys is many
# bytes for its rows), rather than through a Spark job queued behind the pipeline's.
BUILD_SNAPSHOT_BYTES = 64 << 20
BUILD_SNAPSHOT_MEMORY = 512 << 20
# At most this many base and log rows to overlay: a snapshot is read again rather than cached.
REREAD_ROWS = 1_000_000
# Until its sorted copy exists, a lookup in a linked base reads all of it, for the few epochs until
# the maintenance thread has compacted it. Past this many rows those epochs would slow the pipeline
# for longer than the backfill saves: the backfill writes the sorted copy itself (bench/RESULTS.md,
# "A join side that is an append-only table's rows").
LINK_MAX_ROWS = 2_000_000
# At most this many output rows of a build's top aggregate: what is above it runs on the driver.
TOP_ROWS = 100_000
# `big_epoch_rows`'s default: a step whose change has more rows runs on the executors.
BIG_EPOCH_ROWS = 1_000_000
# A stateless tree's backfill of at most this many rows is built on the driver (its Spark build is one
# job, whose fixed costs are most of a small CREATE; past this, its parallel scan and write win).
STATELESS_DRIVER_ROWS = 100_000
# A creating job whose unconsumed log is at most this many committed epochs consumes it and merges in
# band, holding the main graph meanwhile, as the lag rule's last hold would (0: never).
CATCH_UP_EPOCHS = 2


def runs_locally(rows: int) -> bool:
    """Whether a change of `rows` rows is handed to Spark as a local relation (evaluated by the
    optimizer on the driver, collected without a job: `core/local_frames.py`)."""
    return rows <= LOCAL_ROWS


def kafka_on_driver(offsets: int) -> bool:
    """Whether a Kafka read of `offsets` offsets is done by the driver (`connectors/kafka.py`)."""
    return offsets <= KAFKA_DRIVER_ROWS


def snapshot_in_arrow(file_bytes: int) -> bool:
    """Whether a snapshot whose files hold `file_bytes` bytes may be read and overlaid on the driver
    (`storage/snapshot.py: local_snapshot`; it also gives up past `LOCAL_SNAPSHOT_MEMORY` decoded)."""
    return file_bytes <= LOCAL_SNAPSHOT_BYTES


def build_snapshot_in_arrow(file_bytes: int) -> bool:
    """Whether a driver build reads a snapshot whose files hold `file_bytes` bytes with pyarrow."""
    return file_bytes <= BUILD_SNAPSHOT_BYTES


def plain_scan_wins(base_rows: int, overlay: bool) -> bool:
    """Whether Spark's plain scan of a base of `base_rows` rows beats a local relation of them: when
    there is no overlay to compute and the rows are more than a local relation takes."""
    return not overlay and not runs_locally(base_rows)


def rereads(rows: int) -> bool:
    """Whether a snapshot of `rows` base and log rows to overlay is read again rather than cached
    (shuffling that few costs less than building the cache: `SnapshotIO.once`)."""
    return rows <= REREAD_ROWS


def links_base(rows: int) -> bool:
    """Whether a backfill links an append-only table of `rows` rows as a join side's state base
    (`storage/links.py`) rather than write a copy sorted by join key."""
    return rows <= LINK_MAX_ROWS


def is_big_epoch(rows: int, big_epoch_rows: int) -> bool:
    """Whether a step whose change has `rows` rows runs on the executors (`Dataflow.step_frame`,
    `materialize_table_frame`) rather than on the driver."""
    return rows > big_epoch_rows


def builds_on_driver(rows: int, big_epoch_rows: int) -> bool:
    """Whether a stateful backfill over snapshots of `rows` rows in all is built on the driver, as
    one epoch of inserts (`Dataflow.build_local`): no bigger than a step the driver runs."""
    return not is_big_epoch(rows, big_epoch_rows)


def builds_stateless_on_driver(rows: int, big_epoch_rows: int) -> bool:
    """Whether a stateless tree's backfill over a snapshot of `rows` rows is built on the driver
    (`Dataflow.build_local`, its chains in Arrow) rather than by one Spark job."""
    return rows <= min(STATELESS_DRIVER_ROWS, big_epoch_rows)


def catches_up_in_band(epochs: int, rows: int, big_epoch_rows: int) -> bool:
    """Whether a creating job with `epochs` committed epochs of `rows` upstream log rows left to
    consume takes the epoch lock, consumes them and merges at once (`CreatingJob.catch_up_and_merge`),
    rather than consume them while the main graph plans more, for which it would wait an epoch each
    time: few epochs, each no bigger than a step the driver runs."""
    return 0 < CATCH_UP_EPOCHS and epochs <= CATCH_UP_EPOCHS and not is_big_epoch(rows, big_epoch_rows)


def top_limit(big_epoch_rows: int) -> int:
    """The most output rows of a build's top aggregate for which what is above it runs on the
    driver (`Dataflow`'s `Top`)."""
    return min(TOP_ROWS, big_epoch_rows)


def top_on_driver(rows: int, big_epoch_rows: int) -> bool:
    """Whether what is above a build's top aggregate of `rows` output rows runs on the driver."""
    return rows <= top_limit(big_epoch_rows)
