"""What verifying page checksums costs (issue 43: a damaged file is never served): a full read of a
1M-row base file with and without verification, by pyarrow (the driver's reads) and by Spark (its
vectorized scan), on a file written by pyarrow and one written by parquet-mr, alternating the two
settings in one process so both see the same machine."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import fresh_dir, median, report, spark, timed
from sparkwave.storage.integrity import write_table

ROWS = int(os.environ.get("SPARKWAVE_BENCH_INTEGRITY_ROWS", 1_000_000))
ROUNDS = int(os.environ.get("SPARKWAVE_BENCH_INTEGRITY_ROUNDS", 15))


def _files() -> dict[str, str]:
    d = fresh_dir("integrity")
    d.mkdir(parents=True)
    rng = np.random.default_rng(1)
    k = np.arange(ROWS, dtype=np.int64)
    t = pa.table({"_vnode": pa.array((k % 256).astype(np.int16)), "k": k, "v": rng.integers(0, 1 << 40, ROWS),
                  "d": rng.random(ROWS), "s": pa.array([f"name-{i % 50_000}" for i in range(ROWS)]),
                  "ts": pa.array(rng.integers(0, 1 << 50, ROWS), pa.timestamp("us"))})
    write_table(t, d / "arrow.parquet")
    spark().createDataFrame(t.to_pandas()).coalesce(1).write.parquet(str(d / "spark"))
    return {"pyarrow": str(d / "arrow.parquet"), "parquet-mr": glob.glob(str(d / "spark" / "*.parquet"))[0]}


def _spark_scan(path: str, verify: bool) -> None:
    spark().conf.set("parquet.page.verify-checksum.enabled", "true" if verify else "false")
    spark().read.parquet(path).write.format("noop").mode("overwrite").save()


def main() -> str:
    files = _files()
    readers = {"pyarrow": lambda f, v: pq.ParquetFile(f, page_checksum_verification=v).read(),
               "Spark": _spark_scan}
    lines = ["| reader | file written by | unverified: median ms | verified: median ms | verified / unverified |",
             "|---|---|---|---|---|"]
    try:
        for reader, read in readers.items():
            for writer, path in files.items():
                times: dict[bool, list[float]] = {False: [], True: []}
                for r in range(ROUNDS + 1):
                    for verify in (False, True):
                        t = timed(lambda v=verify, f=path, read=read: read(f, v))
                        if r:  # round 0 warms both up
                            times[verify].append(t)
                off, on = median(times[False]) * 1000, median(times[True]) * 1000
                lines.append(f"| {reader} | {writer} | {off:.0f} | {on:.0f} | {on / off:.2f}x |")
    finally:
        spark().conf.set("parquet.page.verify-checksum.enabled", "true")
    return report(f"Page checksum verification: a full read of a {ROWS:,}-row base file (median of {ROUNDS} "
                  "alternating rounds)", lines)


if __name__ == "__main__":
    main()
