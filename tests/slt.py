"""A sqllogictest runner for RisingWave's e2e files, run as a new user would run them: every
statement sent over the PostgreSQL protocol to a sparkwave server, results read as text.

Each record ends in one outcome:
- `pass`: a statement ran as the file expects, or a query returned the expected rows;
- `refused`: sparkwave refused a statement the file expects to run (an unsupported feature, said
  so), or a query failed because of such a refusal earlier in the file;
- `wrong`: a query returned rows other than the expected ones, or a statement the file expects to
  succeed / fail with an error did the opposite after running (a `statement error` that sparkwave
  accepted is `lenient`, counted apart: it is not an answer);
- `error`: a query failed though nothing in the file was refused before it;
- `skipped`: a record this runner does not run (`system`, `sleep`: sparkwave's epochs are driven
  by FLUSH, not by waiting).

RisingWave's session settings (`RW_IMPLICIT_FLUSH`, `streaming_parallelism`, ...) are the runner's:
with implicit flush on, every INSERT / UPDATE / DELETE is followed by a FLUSH, as RisingWave's
option does."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

RW_SETTINGS = {"rw_implicit_flush", "streaming_parallelism", "streaming_use_arrangement_backfill",
               "rw_streaming_enable_delta_join", "streaming_max_parallelism", "backfill_rate_limit",
               "streaming_enable_unaligned_join", "rw_batch_enable_sort_agg", "query_mode",
               "streaming_use_snapshot_backfill", "rw_force_two_phase_agg", "rw_force_split_distinct_agg",
               "streaming_separate_consecutive_join", "rw_enable_shared_source", "timezone", "time zone"}
DML = re.compile(r"^\s*(insert|update|delete)\b", re.IGNORECASE)
SETTING = re.compile(r"^\s*set\s+(\w+(?:\s+zone)?)\s*(?:to|=)?\s*(.*?);?\s*$", re.IGNORECASE | re.DOTALL)


@dataclass
class Record:
    kind: str  # statement | query | skip
    sql: str
    line: int
    expect_error: bool = False
    expected: list[str] = field(default_factory=list)
    sort: str = "nosort"


@dataclass
class Outcome:
    record: Record
    result: str  # pass | refused | wrong | lenient | skipped
    detail: str = ""


def parse(text: str) -> list[Record]:
    """The records of a sqllogictest file (the subset RisingWave's files use)."""
    lines = text.splitlines()
    out: list[Record] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        head, start = line.split(), i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            body.append(lines[i])
            i += 1
        expected: list[str] = []
        if i < len(lines) and lines[i].strip() == "----":
            i += 1
            while i < len(lines) and lines[i].strip():
                expected.append(lines[i])
                i += 1
        sql = "\n".join(body)
        if head[0] == "statement":
            out.append(Record("statement", sql, start, expect_error=head[1] == "error"))
        elif head[0] == "query":
            if len(head) > 1 and head[1] == "error":
                out.append(Record("statement", sql, start, expect_error=True))
                continue
            sort = next((h for h in head[2:] if h in ("rowsort", "valuesort", "nosort")), "nosort")
            out.append(Record("query", sql, start, expected=expected, sort=sort))
        elif head[0] == "control":
            out.append(Record("control", " ".join(head[1:]), start))
        else:  # sleep, system ok, include, onlyif/skipif, halt
            out.append(Record("skip", line, start))
    return out


_OFFSET = re.compile(r"^(\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d):00$")


def _tokens(rows: list[str], sort: str) -> list[str] | list[list[str]]:
    """A result's values as RisingWave's runner compares them (whitespace-separated; a time zone
    offset `+00:00` as PostgreSQL writes it, `+00`)."""
    split = [[_OFFSET.sub(r"\1", t) for t in r.split()] for r in rows]
    if sort == "valuesort":
        return sorted(t for r in split for t in r)
    return sorted(split) if sort == "rowsort" else split


def _text(value: bytes | None) -> str:
    if value is None:
        return "NULL"
    s = value.decode()
    return "(empty)" if s == "" else s


class Runner:
    """Runs one file's records against a sparkwave server at `dsn`, each file in its own warehouse."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.implicit_flush = False
        self.substitution = False
        self.refused: set[str] = set()  # names of relations whose CREATE was refused

    def close(self) -> None:
        self.conn.close()

    def _exec(self, sql: str) -> tuple[list[list[str]] | None, str | None]:
        res = self.conn.pgconn.exec_(sql.encode())
        status = res.status
        if status == psycopg.pq.ExecStatus.FATAL_ERROR:
            return None, (res.error_message or b"").decode().strip()
        rows = [[_text(res.get_value(r, c)) for c in range(res.nfields)] for r in range(res.ntuples)]
        return rows, None

    def _setting(self, sql: str) -> bool:
        m = SETTING.match(sql)
        if not m or m.group(1).lower() not in RW_SETTINGS:
            return False
        if m.group(1).lower() == "rw_implicit_flush":
            self.implicit_flush = m.group(2).strip().strip("'").lower() in ("true", "on", "1")
        return True

    def run(self, records: list[Record]) -> list[Outcome]:
        out: list[Outcome] = []
        for rec in records:
            out.append(self._one(rec))
        return out

    def _one(self, rec: Record) -> Outcome:
        if rec.kind == "control":
            self.substitution = rec.sql.startswith("substitution on")
            return Outcome(rec, "skipped", rec.sql)
        if rec.kind == "skip":
            return Outcome(rec, "skipped", rec.sql)
        sql = rec.sql.replace("$__NOW__", str(time.time_ns())) if self.substitution else rec.sql
        if rec.kind == "statement" and self._setting(sql):
            return Outcome(rec, "skipped", "a RisingWave session setting")
        rows, error = self._exec(sql)
        if error is None and DML.match(sql) and self.implicit_flush:
            _, flush_error = self._exec("FLUSH")
            if flush_error is not None:
                return Outcome(rec, "wrong", f"FLUSH after it failed: {flush_error}")
        if rec.kind == "statement":
            return self._statement(rec, sql, error)
        if error is not None:
            return Outcome(rec, "refused" if self.refused else "error", error)
        got, want = _tokens([" ".join(r) for r in rows or []], rec.sort), _tokens(rec.expected, rec.sort)
        if got == want:
            return Outcome(rec, "pass")
        return Outcome(rec, "wrong", f"expected {want}, got {got}")

    def _statement(self, rec: Record, sql: str, error: str | None) -> Outcome:
        if rec.expect_error:
            return Outcome(rec, "pass" if error is not None else "lenient", error or "accepted")
        if error is None:
            return Outcome(rec, "pass")
        m = re.match(r"\s*create\s+(?:materialized\s+view|table|source|sink|view|index)\s+(?:if\s+not\s+exists\s+)?"
                     r"(\w+)", sql, re.IGNORECASE)
        if m:
            self.refused.add(m.group(1).lower())
        return Outcome(rec, "refused", error)


def run_file(path: Path, dsn: str) -> list[Outcome]:
    runner = Runner(dsn)
    try:
        return runner.run(parse(path.read_text()))
    finally:
        runner.close()
