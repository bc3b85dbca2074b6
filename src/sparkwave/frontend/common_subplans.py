"""Common subplans: a subplan that a query spells twice is planned once and shared.

Nexmark q5 counts bids per (auction, HOP window) in two subqueries, once per side of a join. Planned
as written, the MV would evaluate the same aggregate twice per epoch and keep two identical state
tables (7.3M rows each for 1.5M bids), and its backfill would build both. After pruning, this pass
finds two subplans that compute the same rows (the same scans, windows, predicates, expressions and
groups, whatever their internal column names and group order), keeps the one whose columns include
the other's under a `Share` (`stream/share.py`) and puts a renaming projection of the same share in
place of the other, so that its parents read the columns they were planned with. A third copy
reads the same share.

Only subplans of scans, projections and aggregates with an aggregate among them are shared: the
aggregate is what keeps state and costs a shuffle; a scan with projections alone is cheaper to read
twice than to share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import fields

from sparkwave.stream.aggregate import Aggregate
from sparkwave.stream.expressions import canonical, exprs_of, renamed
from sparkwave.stream.operator import Operator
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan
from sparkwave.stream.share import Share

Names = dict[str, str]  # a column of the second subplan -> the first's column holding the same values


def share_common_subplans(root: Operator, ids: Iterator[int]) -> None:
    """Share the subplans under `root` that compute the same rows (new operator ids from `ids`)."""
    while (found := _next_pair(root)) is not None:
        first, second, names = found
        share = next((s for s in root.walk() if isinstance(s, Share) and s.input is first), None)
        if share is None:  # else a third copy: read from the same share
            share = Share(next(ids), list(first.columns), list(first.key), input=first)
            _replace(root, first, share)
        rename = Project(next(ids), list(second.columns), list(second.key), input=share,
                         exprs=exprs_of((n, f"`{names[n]}`") for n in second.names))
        _replace(root, second, rename)


def _next_pair(root: Operator) -> tuple[Operator, Operator, Names] | None:
    """The largest two subplans that compute the same rows, with the second's columns in the first's."""
    candidates = sorted((op for op in root.walk() if _shareable(op)), key=lambda op: -len(op.walk()))
    for i, a in enumerate(candidates):
        for b in candidates[i + 1:]:
            if _inside(a, b) or _inside(b, a):
                continue
            for first, second in ((a, b), (b, a)):
                if (names := _match(first, second)) is not None:
                    return first, second, names
    return None


def _shareable(op: Operator) -> bool:
    below = op.walk()
    return all(isinstance(o, (Scan, Project, Aggregate)) for o in below) and any(isinstance(o, Aggregate)
                                                                                 for o in below)


def _inside(op: Operator, tree: Operator) -> bool:
    return any(o is op for o in tree.walk())


def _replace(root: Operator, old: Operator, new: Operator) -> None:
    """Make every parent of `old` read `new` instead."""
    for op in root.walk():
        for f in fields(op):
            value = getattr(op, f.name)
            if value is old:
                setattr(op, f.name, new)
            elif isinstance(value, list) and any(v is old for v in value):  # a union's inputs
                setattr(op, f.name, [new if v is old else v for v in value])


def _match(a: Operator, b: Operator) -> Names | None:
    """If `b` computes the rows of `a` (a subset of its columns), each of `b`'s columns' name in `a`."""
    if isinstance(a, Scan) and isinstance(b, Scan):
        if (a.relation, a.window) != (b.relation, b.window):
            return None
        names = _columns(a.exprs, b.exprs, None)
    elif isinstance(a, Project) and isinstance(b, Project):
        inner = _match(a.input, b.input)
        if inner is None or not _same_predicate(a.predicate, b.predicate, inner):
            return None
        names = _columns(a.exprs, b.exprs, inner)
    elif isinstance(a, Aggregate) and isinstance(b, Aggregate):
        inner = _match(a.input, b.input)
        if inner is None or (a.scalar, a.append_only) != (b.scalar, b.append_only) \
                or sorted(inner.get(g, "") for g in b.group) != sorted(a.group):
            return None
        names = {g: inner[g] for g in b.group}
        for agg in b.aggs:
            arg = None if agg.arg is None else inner.get(agg.arg)
            same = [x.out for x in a.aggs if (x.fn, x.arg, x.type) == (agg.fn, arg, agg.type)]
            if not same or (agg.arg is not None and arg is None):
                return None
            names[agg.out] = same[0]
    else:
        return None
    if names is None or set(names) != set(b.names) or any(a.type_of(names[n]) != b.type_of(n) for n in b.names):
        return None
    if isinstance(a, Scan) and isinstance(b, Scan) and not _same_predicate(a.predicate, b.predicate, names):
        return None  # a scan's predicate is over its own columns
    return names


def _columns(a_exprs: Sequence[tuple[str, str]], b_exprs: Sequence[tuple[str, str]],
             inner: Names | None) -> Names | None:
    """Each of `b`'s expressions' column in `a`: one with the same expression (over the inputs'
    matching columns, `inner`; a scan's are over the upstream's own columns)."""
    by_expr: dict[str, str] = {}
    for n, e in a_exprs:
        by_expr.setdefault(canonical(e), n)  # `renamed` writes its text as the generator does
    names: Names = {}
    for n, e in b_exprs:
        text = canonical(e) if inner is None else renamed(e, inner)
        if text is None or text not in by_expr:
            return None
        names[n] = by_expr[text]
    return names


def _same_predicate(a: str | None, b: str | None, names: Names) -> bool:
    return a == b if a is None or b is None else renamed(b, names) == canonical(a)
