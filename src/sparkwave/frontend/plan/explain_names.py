"""Readable names for what a user sees of an MV's internals (EXPLAIN, the dashboard). The planner
names every internal column uniquely (`c7_price`: the 7th column it named, from `price`); a user
sees the column's own name (`price`), an aggregate's output as its call (`count(*)`), and a
qualified name only where two different columns would read alike: by relation (`bid.price`), by
scan when a relation is scanned twice (`bid#2.price`), by operator otherwise (`num#5`). A renaming
projection that keeps the name (`c9_auction := c1_auction`) is the same column, so it reads the
same; one that renames (`starttime := window_start`) introduces the new name."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from sparkwave.stream.aggregate import Agg, Aggregate
from sparkwave.stream.operator import Operator
from sparkwave.stream.over import OverWindow
from sparkwave.stream.project import Project
from sparkwave.stream.scan import Scan

_INTERNAL = re.compile(r"c\d+_(\w*)")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL = re.compile(r"'(?:[^']|'')*'")  # a SQL string literal: its text is never a column
ARG = "arg"  # the planner's name for an aggregate's argument (`c22_arg`): no name of the user's
MAX_INLINE = 48  # a longer computed argument (an exact decimal sum's parts) keeps its name
_CALLS = {"count_star": "count(*)", "count_distinct": "count(DISTINCT {})"}


def base(name: str) -> str:
    """The user's name an internal column was made from (`c3_auction` -> `auction`)."""
    m = _INTERNAL.fullmatch(name)
    return m.group(1) if m else name


def sql_text(e: object) -> str:
    """An operator's expression as text without Spark's quoting (a Spark SQL string, or a node that
    renders itself as SQL)."""
    text = e.sql() if hasattr(e, "sql") else str(e)
    return text.replace("`", "")


@dataclass
class _Origin:
    """A column that is not merely another's name: where it was made, and what it reads as."""

    name: str
    op: int  # the operator that made it
    relation: str | None = None  # a scan's column: the relation it reads
    agg: Agg | None = None  # an aggregate's output: shown as its call
    expr: object = None  # an aggregate's computed argument: shown as its expression
    renamed: str | None = None  # the column it renames (`starttime := window_start`)


class Names:
    """The readable name of each internal column of a tree (`names(c)`), each distinct column's
    name distinct. `internal=True` keeps the planner's names (for debugging the planner)."""

    def __init__(self, root: Operator, *, internal: bool = False) -> None:
        self._internal = internal
        self._origin: dict[str, str] = {}  # internal column -> the internal column it is a name of
        self._made: dict[str, _Origin] = {}
        self._scan_count: dict[str, int] = defaultdict(int)
        for op in root.walk():
            self._add(op)
        self._shown = self._resolve()

    def __call__(self, name: str) -> str:
        if self._internal:
            return name
        origin = self._origin.get(name)
        return self._shown[origin] if origin is not None else name

    def all(self, names: list[str]) -> str:
        return ", ".join(self(n) for n in names)

    def expr(self, e: object) -> str:
        """An expression with each internal column under its readable name."""
        text = sql_text(e)
        if self._internal:
            return text
        out, at = [], 0
        for m in _LITERAL.finditer(text):
            out.append(self._rename(text[at:m.start()]))
            out.append(m.group(0))
            at = m.end()
        out.append(self._rename(text[at:]))
        return "".join(out)

    def call(self, a: Agg) -> str:
        """An aggregate call over readable names (`max(price)`, `count(*)`)."""
        arg = self(a.arg) if a.arg else ""
        return _CALLS[a.fn].format(arg) if a.fn in _CALLS else f"{a.fn}({arg})"

    def _rename(self, text: str) -> str:
        return IDENT.sub(lambda m: self(m.group(0)) if m.group(0) in self._origin else m.group(0), text)

    # --- building ---------------------------------------------------------------------------------
    def _new(self, name: str, op: Operator, agg: Agg | None = None, expr: object = None) -> None:
        self._origin[name] = name
        self._made[name] = _Origin(base(name), op.id, None, agg, expr)

    def _same(self, name: str, of: str) -> bool:
        """Whether `name := of` is the same column: a name that reads as `of` or as the column `of`
        names (a shared subplan's renames), or the planner's name for an aggregate's argument."""
        if base(name) in (base(of), ARG):
            return True
        made: _Origin | None = self._made[self._origin[of]]
        while made is not None:  # through the renames that made `of`
            if made.agg is None and made.expr is None and base(name) == made.name:
                return True
            made = self._made[made.renamed] if made.renamed else None
        return False

    def _add(self, op: Operator) -> None:
        if isinstance(op, Scan):
            self._scan_count[op.relation] += 1
            for n, e in op.exprs:
                text = sql_text(e)
                if IDENT.fullmatch(text):
                    self._origin[n] = n
                    self._made[n] = _Origin(text, op.id, op.relation)
                else:
                    self._new(n, op)
        elif isinstance(op, Project):
            for n, e in op.exprs:
                text = sql_text(e)
                if text in self._origin and self._same(n, text):
                    self._origin[n] = self._origin[text]  # the same column under a name that reads the same
                elif base(n) == ARG and len(text) <= MAX_INLINE:
                    self._new(n, op, expr=e)  # an aggregate's argument reads as what it computes
                else:
                    self._new(n, op)
                    if text in self._origin:
                        self._made[n].renamed = self._origin[text]
        elif isinstance(op, Aggregate):
            for a in op.aggs:
                self._new(a.out, op, agg=a)
        elif isinstance(op, OverWindow):
            for n, _ in op.calls:
                self._new(n, op)
        for n in op.names:  # what the cases above do not name: a window's columns, VALUES, ...
            if n not in self._origin:
                self._new(n, op)

    def _resolve(self) -> dict[str, str]:
        """Each origin's shown name: plain, then qualified where two would read alike; aggregate
        calls after the columns they read are named."""
        plain = [o for o in self._made.values() if o.agg is None and o.expr is None]
        shown = _distinct(plain, self._made, self._scan_count)
        self._shown = shown
        for later in ([o for o in self._made.values() if o.expr is not None],
                      [o for o in self._made.values() if o.agg is not None]):
            for o in later:
                o.name = self.call(o.agg) if o.agg is not None else self.expr(o.expr)
            shown.update(_distinct(later, self._made, self._scan_count, taken=set(shown.values())))
        return shown


def _distinct(origins: list[_Origin], made: dict[str, _Origin], scans: dict[str, int],
              taken: set[str] | None = None) -> dict[str, str]:
    """Shown names for `origins` (keyed by internal name), none equal to another or to `taken`."""
    key_of = {id(o): k for k, o in made.items()}
    taken = set(taken or ())
    by_name: dict[str, list[_Origin]] = defaultdict(list)
    for o in origins:
        by_name[o.name].append(o)
    out: dict[str, str] = {}
    for name, group in by_name.items():
        if len(group) == 1 and name not in taken:
            out[key_of[id(group[0])]] = name
            continue
        made_here = [o for o in group if o.relation is None]
        tried: dict[str, str] = {}
        for o in group:
            if o.relation is not None:
                tried[key_of[id(o)]] = (o.relation if scans[o.relation] == 1 else f"{o.relation}#{o.op}") + f".{name}"
            else:
                tried[key_of[id(o)]] = name if len(made_here) == 1 and name not in taken else f"{name}#{o.op}"
        counts: dict[str, int] = defaultdict(int)
        for t in tried.values():
            counts[t] += 1
        # what qualifying cannot tell apart keeps the planner's name (unique by construction)
        out.update({k: t if counts[t] == 1 and t not in taken else k for k, t in tried.items()})
    return out
