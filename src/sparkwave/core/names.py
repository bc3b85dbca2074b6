"""Relation names. A name becomes a folder of the warehouse (`storage/warehouse.py`), so the rule
below is what keeps every relation inside it: PostgreSQL's unquoted identifiers (letters, digits
and underscores, not starting with a digit, at most 63 characters), lower-cased. A quoted name
that breaks the rule (`"m.x"`, `"../t"`) is refused, never mapped to a path."""

from __future__ import annotations

import re

from sparkwave.core.errors import SqlError

MAX_LENGTH = 63  # PostgreSQL's NAMEDATALEN - 1
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def is_name(name: str) -> bool:
    return len(name) <= MAX_LENGTH and _NAME.fullmatch(name) is not None


def relation_name(raw: str, where: str = "") -> str:
    """`raw` lower-cased, if it is a valid relation name; a `SqlError` naming it otherwise."""
    name = raw.lower()
    if not is_name(name):
        raise SqlError(f"invalid name {raw!r}: a table or materialized view name is letters, digits and "
                       f"underscores, not starting with a digit, at most {MAX_LENGTH} characters{where}")
    return name
