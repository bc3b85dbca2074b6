"""EMIT ON WINDOW CLOSE over window functions ordered by a watermarked column (RisingWave's EOWC
over window): a row is emitted once, when its outputs can no longer change.

Over an input whose ORDER BY column `ts` carries a watermark W, a row whose `ts` is below W has all
its preceding rows already (a later row has `ts >= W`, so it sorts after; NULLs sort last), but a
frame that reads FOLLOWING rows (`lead(x, n)`, `ROWS ... n FOLLOWING`) still changes until the n-th
row after it is below W too. So the planner adds to the `OverWindow` one call, the row's
*frame_end*: the ORDER BY value of the farthest row any of its frames reads after it (`lead(ts, n)
OVER (the call's window)`; `ts + x` for a RANGE frame ending at `x FOLLOWING`; `ts` itself when no
frame reads ahead; NULL while that row does not exist). The `Eowc` above buffers each row by it and
emits the row when the watermark passes it. A frame that reads to the partition's end (UNBOUNDED
FOLLOWING, ntile, cume_dist, percent_rank) is never final and is refused, as is an ORDER BY that
does not start with the watermarked column ascending."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from sparkwave.frontend.plan.context import PlanContext
from sparkwave.stream.expressions import exprs_of
from sparkwave.stream.over import OverWindow
from sparkwave.stream.over_retire import Retire
from sparkwave.stream.watermark import Derivation

_WRITE = ("write OVER (PARTITION BY ... ORDER BY <the watermarked column>) with window functions that read no "
          "further than a fixed distance ahead (row_number, rank, lag, lead(x, n), aggregates over ROWS "
          "BETWEEN ... AND n FOLLOWING, RANGE BETWEEN ... AND <interval> FOLLOWING, or the default frame)")
_WHOLE_PARTITION = (exp.Ntile, exp.PercentRank, exp.CumeDist)
_NUMBERING = (exp.RowNumber, exp.Rank, exp.DenseRank)


def close_call(ctx: PlanContext, over: OverWindow, wms: dict[str, Derivation]) -> tuple[str, Derivation]:
    """Add the close call to `over` (see the module's docstring); returns its column and the
    watermark that closes it (the ORDER BY column's)."""
    column: str | None = None
    leads: dict[str, None] = {}  # Spark SQL of the order value of each frame's last row
    behind: list[int | None] = []
    partitions: set[frozenset[str]] = set()
    by_columns = True  # every PARTITION BY names columns (an expression's partition is not the state's)
    by_order = True  # every ORDER BY is the column, then the row key: the order `retired` ranks rows in
    for _, e in over.calls:
        for w in sqlglot.parse_one(str(e), read="spark").find_all(exp.Window):
            order = [o for o in (w.args.get("order") or exp.Order(expressions=[])).expressions]
            first = order[0].this if order else None
            if not isinstance(first, exp.Column) or first.name not in wms or order[0].args.get("desc") \
                    or order[0].args.get("nulls_first"):  # NULL is never late: a NULL first could arrive any time
                raise ctx.err(f"EMIT ON WINDOW CLOSE: {_shown(w)} must ORDER BY a column with a watermark first, "
                              f"ascending, NULLS LAST; {_WRITE}", "OVER")
            if column is not None and first.name != column:
                raise ctx.err("EMIT ON WINDOW CLOSE: every window function must ORDER BY the same watermarked "
                              f"column first; {_WRITE}", "OVER")
            column = first.name
            ahead = _rows_ahead(ctx, w)
            behind.append(_rows_behind(w))
            parts = list(w.args.get("partition_by") or [])
            partitions.add(frozenset(p.sql(dialect="spark") for p in parts))
            by_columns = by_columns and all(isinstance(p, exp.Column) for p in parts)
            rest = [o.this.name if isinstance(o.this, exp.Column) else None for o in order[1:]]
            by_order = by_order and rest in ([], list(over.input.key))
            if isinstance(ahead, exp.Expr):  # RANGE ... x FOLLOWING: the frame ends at the value plus x
                leads[exp.paren(exp.Add(this=exp.column(column, quoted=True), expression=ahead.copy())).sql(
                    dialect="spark")] = None
            elif ahead:
                lead = exp.Window(this=exp.Anonymous(this="lead", expressions=[
                    exp.column(column, quoted=True), exp.Literal.number(ahead)]),
                    partition_by=w.args.get("partition_by"), order=w.args.get("order"))
                leads[lead.sql(dialect="spark")] = None
    assert column is not None, "BUG: an OverWindow without a window call"
    close = ctx.name("frame_end")  # the order value of the last row its frames read
    if not leads:
        sql = f"`{column}`"
    elif len(leads) == 1:
        sql = next(iter(leads))
    else:  # Spark's greatest skips NULLs: a row is open while any of its frames lacks its last row
        sql = (f"CASE WHEN {' OR '.join(f'({x}) IS NULL' for x in leads)} THEN NULL "
               f"ELSE greatest({', '.join(leads)}) END")
    over.calls = [*over.calls, *exprs_of([(close, sql)])]
    over.columns = [*over.columns, (close, over.input.type_of(column))]
    # retired per state partition: only exact when every call partitions as the state does
    if all(b is not None for b in behind) and len(partitions) == 1 and by_columns and by_order:
        over.retire = Retire(close, column, max(b for b in behind if b is not None), wms[column])
    return close, wms[column]


def _rows_ahead(ctx: PlanContext, w: exp.Window) -> int | exp.Expr:
    """How many rows after the current one (in the window's order) the call reads, or for a RANGE
    frame ending at `x FOLLOWING`, `x`."""
    fn = w.this
    if isinstance(fn, _WHOLE_PARTITION):
        raise ctx.err(f"EMIT ON WINDOW CLOSE: {fn.sql_name().lower()}() depends on the whole partition, which "
                      f"never closes; {_WRITE}", "OVER")
    if isinstance(fn, exp.Lead | exp.Lag):  # lag(x, -n) reads n rows ahead, as lead(x, n)
        offset = _offset(fn)
        if offset is None:
            raise ctx.err(f"EMIT ON WINDOW CLOSE: {fn.sql_name().lower()}()'s offset must be a constant; {_WRITE}",
                          "OVER")
        return max(offset if isinstance(fn, exp.Lead) else -offset, 0)
    spec = w.args.get("spec")
    if spec is None:
        return 0  # the default frame: up to the current row's peers, all below the watermark with it
    end, side = spec.args.get("end"), str(spec.args.get("end_side") or "").upper()
    if side != "FOLLOWING":
        return 0
    kind = str(spec.args.get("kind", "")).upper()
    if kind == "RANGE" and isinstance(end, exp.Interval | exp.Literal):
        return end
    if kind != "ROWS" or not isinstance(end, exp.Literal):
        raise ctx.err(f"EMIT ON WINDOW CLOSE: {_shown(w)}'s frame ends "
                      f"{spec.sql(dialect='postgres')}, which closes only with the partition; {_WRITE}", "OVER")
    return int(end.this)


def _rows_behind(w: exp.Window) -> int | None:
    """How many rows before the current one the call reads (None: back to the partition's start)."""
    fn = w.this
    if isinstance(fn, exp.Lead | exp.Lag):  # lead(x, -n) reads n rows back, as lag(x, n)
        offset = _offset(fn)
        return None if offset is None else max(offset if isinstance(fn, exp.Lag) else -offset, 0)
    spec = w.args.get("spec")
    if spec is None or str(spec.args.get("kind", "")).upper() != "ROWS" or isinstance(fn, _NUMBERING):
        return None  # numbering, the default frame and RANGE frames read back to the partition's start
    start, side = spec.args.get("start"), str(spec.args.get("start_side") or "").upper()
    if side == "PRECEDING":
        return int(start.this) if isinstance(start, exp.Literal) else None
    return 0  # CURRENT ROW or n FOLLOWING


def _offset(fn: exp.Lead | exp.Lag) -> int | None:
    """lead's or lag's offset as a signed constant (1 when not given; None: not a constant)."""
    offset = fn.args.get("offset")
    if offset is None:
        return 1
    sign = -1 if isinstance(offset, exp.Neg) else 1
    value = offset.this if isinstance(offset, exp.Neg) else offset
    if not isinstance(value, exp.Literal) or value.is_string:
        return None
    return sign * int(value.this)


def _shown(w: exp.Window) -> str:
    return f"{w.this.sql_name().lower()}() OVER (...)"
