"""`FOR SYSTEM_TIME AS OF PROCTIME()` recognised in a parsed query, with no planner import: the
closed-world check (`closed_world.py`, run when a statement is parsed) and the temporal join's
planning (`temporal_join.py`) both read it."""

from __future__ import annotations

from sqlglot import exp

SHAPE = "[LEFT] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k"


def is_proctime(version: object) -> bool:
    """Whether a table's `version` (sqlglot's `FOR SYSTEM_TIME AS OF ...`) is `AS OF PROCTIME()`."""
    if not isinstance(version, exp.Version) or str(version.args.get("kind") or "").upper() != "AS OF":
        return False
    target = version.args.get("expression")
    return isinstance(target, exp.Anonymous) and target.name.lower() == "proctime" and not target.expressions
