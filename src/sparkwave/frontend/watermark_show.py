"""What users see of watermarks: DESCRIBE's rows for a watermarked relation (its declaration, its
watermark as committed, the late rows it dropped) and for an EMIT ON WINDOW CLOSE MV (append-only,
closed by which watermark), and the `/metrics` families of late rows and watermarks."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from sparkwave.core.catalog import Catalog, Relation
from sparkwave.stream.watermark import Declared

DescribeRow = tuple[str, str, bool | None, bool | None, str | None]
_EPOCH = datetime(1970, 1, 1)


def shown(value: int | None, type_name: str) -> str:
    """A watermark's value as its column's type reads (microseconds for times)."""
    if value is None:
        return "none yet (no row seen)"
    if type_name in ("timestamp", "timestamptz", "date"):
        return (_EPOCH + timedelta(microseconds=value)).isoformat(sep=" ")
    return str(value)


def describe_rows(catalog: Catalog, rel: Relation) -> list[DescribeRow]:
    """DESCRIBE's rows about event time for `rel` (none for a relation without any)."""
    out: list[DescribeRow] = []
    decl = Declared.of(rel.definition)
    if decl is not None:
        column = rel.schema.column(decl.column)
        value = catalog.watermark(rel.name, catalog.committed_epoch())
        late = catalog.late_rows().get(rel.name, 0)
        out.append(("watermark", "watermark", None, None,
                    f"WATERMARK FOR {decl.column} AS {decl.sql or decl.column}; now "
                    f"{shown(value, column.type.name if column else 'bigint')}; late rows dropped: {late}"))
    dataflow = rel.definition.get("dataflow")
    if rel.kind == "mv" and dataflow is not None and '"op": "eowc"' in json.dumps(dataflow):
        out.append(("emit on window close", "append-only", None, None,
                    "EMIT ON WINDOW CLOSE: append-only; each row is inserted once, when the watermark passes "
                    "it (its window's end, its time, or the last row its window functions read), and never "
                    "updated"))
    return out


def watermark_metrics(catalog: Catalog) -> list[Metric]:
    """`sparkwave_late_rows_total{relation}` and `sparkwave_watermark_seconds{relation}` (event time, UTC)."""
    late = CounterMetricFamily("sparkwave_late_rows", "Rows dropped because they arrived below their relation's "
                               "watermark", labels=["relation"])
    mark = GaugeMetricFamily("sparkwave_watermark_seconds", "A watermarked relation's committed watermark "
                             "(seconds since 1970 for time columns)", labels=["relation"])
    counts = catalog.late_rows()
    epoch = catalog.committed_epoch()
    for rel in catalog.relations():
        decl = Declared.of(rel.definition)
        if decl is None:
            continue
        late.add_metric([rel.name], counts.get(rel.name, 0))
        value = catalog.watermark(rel.name, epoch)
        column = rel.schema.column(decl.column)
        if value is not None:
            timed = column is not None and column.type.name in ("timestamp", "timestamptz", "date")
            mark.add_metric([rel.name], value / 1_000_000 if timed else value)
    return [late, mark]
