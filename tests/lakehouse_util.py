"""What the Delta and posix_fs source tests share with their crash child: the files they write (as
an outside writer would: whole files appearing under their names, Delta versions by delta-rs) and
the rows a relation has read by an epoch (from the ranges each committed epoch's plan recorded)."""

from __future__ import annotations

import os
from pathlib import Path

FILE_DDL = "id INTEGER, name VARCHAR, price DOUBLE"
FILE_COLS = "id int, name varchar, price double"


def file_rows(n: int, lo: int) -> list[tuple]:
    return [(i, f"n{i % 7}", (i * 37) % 100 + 0.5) for i in range(lo, lo + n)]


def write_csv(root: Path, name: str, rows: list[tuple], bad_line: str | None = None) -> None:
    """A CSV file with a header, written beside its name and renamed (whole when it appears);
    `bad_line` goes in the middle."""
    lines = ["id,name,price"] + [f"{i},{n},{p}" for i, n, p in rows]
    if bad_line is not None:
        lines.insert(len(lines) // 2 + 1, bad_line)
    final = root / name
    tmp = final.with_name(f".{final.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, final)


def files_read_by(session, relation: str, epoch: int) -> list[str]:
    """The files (paths under the root) `relation` had read by `epoch`."""
    out = []
    for e, ranges in session.catalog.source_ranges(relation):
        if e > epoch:
            break
        out.extend(split.partition(" ")[2] for split in ranges)
    return out


def version_read_by(session, relation: str, epoch: int) -> int:
    """The newest Delta version `relation` had read by `epoch` (-1: none)."""
    last = -1
    for e, ranges in session.catalog.source_ranges(relation):
        if e > epoch:
            break
        last = ranges["0"][1] - 1
    return last
