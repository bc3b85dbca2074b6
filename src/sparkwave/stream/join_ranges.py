"""An outer join's range conditions between a time of each side (`a LEFT JOIN b ON a.k = b.k AND
a.ts BETWEEN b.ts AND b.ts + INTERVAL '10' SECOND`): part of the join's ON clause, so they decide
which rows match and which are NULL-padded (an inner join applies them after it instead). Each is
`left <op> right + offset`, the times as the integers watermarks are (microseconds), evaluated the
same way in Arrow (`matched`) and in Spark (`condition`): NULL never matches."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F

from sparkwave.stream.watermark import as_ints
from sparkwave.stream.watermark_clean import as_micros

Op = Literal["<", "<=", ">", ">="]
Range = tuple[str, Op, str, int]  # left column, operator, right column, offset added to the right one
_ARROW = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def matched(pairs: pa.Table, ranges: list[Range]) -> np.ndarray:
    """Which joined rows (both sides' columns) satisfy every range."""
    keep = np.ones(pairs.num_rows, dtype=bool)
    for left, op, right, offset in ranges:
        test = _ARROW[op](as_ints(pairs[left]), pc.add(as_ints(pairs[right]), offset))
        keep &= pc.fill_null(test, False).to_numpy(zero_copy_only=False)
    return keep


def condition(ranges: list[Range], types: dict[str, str]) -> SparkColumn | None:
    """The ranges as one Spark condition over both sides' columns (`types`: their SQL types)."""
    out: SparkColumn | None = None
    for left, op, right, offset in ranges:
        a, b = as_micros(left, types[left]), as_micros(right, types[right]) + F.lit(offset)
        c = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        out = c if out is None else out & c
    return out
