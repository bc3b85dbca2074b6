"""`sparkwave sql` as a client: beside a running `sparkwave serve` (its `server.json` names a live
pid and a port that answers) or with `--url`, the statements go over the PostgreSQL protocol
(psycopg 3, the simple query protocol, one statement at a time so each result prints in order);
otherwise they run embedded, through the same `SessionBackend` the server uses. Either way each
result prints as psql prints it. This module imports no pyspark: a client starts in milliseconds."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

SERVER_FILE = "server.json"
NUMERIC_OIDS = frozenset({20, 21, 23, 26, 700, 701, 1700})
FETCH_ROWS = 1000


@dataclass(frozen=True)
class Piece:
    text: str
    offset: int  # 0-based character offset of the statement in the submitted text


def split_sql(text: str) -> list[Piece]:
    """Statements of `text` split on top-level semicolons: quotes ('', "", E'' with backslashes,
    $tag$ ... $tag$) and comments (--, nested /* */) hide theirs."""
    out: list[Piece] = []
    i, start, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in "'\"":
            escapes = c == "'" and i > 0 and text[i - 1] in "eE" and (i < 2 or not (text[i - 2].isalnum()
                                                                                 or text[i - 2] == "_"))
            i += 1
            while i < n:
                if escapes and text[i] == "\\":
                    i += 2
                elif text[i] == c:
                    if text.startswith(c * 2, i):
                        i += 2
                    else:
                        break
                else:
                    i += 1
            i += 1
        elif c == "$" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = text.find("$", i + 1)
            tag = text[i:j + 1] if j > 0 else ""
            if tag and (tag == "$$" or tag[1:-1].replace("_", "a").isalnum() and not tag[1].isdigit()):
                end = text.find(tag, j + 1)
                i = n if end < 0 else end + len(tag)
            else:
                i += 1
        elif c == ";":
            _add(out, text, start, i)
            start = i = i + 1
        else:
            i += 1
    _add(out, text, start, n)
    return out


def _add(out: list[Piece], text: str, start: int, end: int) -> None:
    chunk = text[start:end]
    if _meaningful(chunk):
        lead = len(chunk) - len(chunk.lstrip())
        out.append(Piece(chunk.strip(), start + lead))


def _meaningful(chunk: str) -> bool:
    """Whether a chunk holds more than whitespace and comments."""
    rest = chunk
    while True:
        rest = rest.lstrip()
        if rest.startswith("--"):
            nl = rest.find("\n")
            rest = "" if nl < 0 else rest[nl + 1:]
        elif rest.startswith("/*"):
            end = rest.find("*/")
            rest = "" if end < 0 else rest[end + 2:]
        else:
            return bool(rest)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a 0-based offset."""
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


# --- finding the server ------------------------------------------------------------------------
def find_server(warehouse: str | os.PathLike[str]) -> tuple[str, int] | None:
    """The address in the warehouse's `server.json` if its process lives and its port answers;
    a stale file (the pid gone, a crash) is ignored."""
    try:
        info = json.loads((Path(warehouse) / SERVER_FILE).read_text())
        host, port, pid = str(info["host"]), int(info["port"]), int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    try:
        with socket.create_connection((host, port), timeout=2):
            return host, port
    except OSError:
        return None


# --- printing as psql does -----------------------------------------------------------------------
class Printer:
    def __init__(self, out: TextIO, width: int | None = None) -> None:
        self.out = out
        self.width = width or shutil.get_terminal_size((120, 24)).columns

    def tag(self, tag: str) -> None:
        self.out.write(tag + "\n")
        self.out.flush()

    def notice(self, text: str) -> None:
        self.out.write(f"NOTICE:  {text}\n")

    def rows(self, columns: Sequence[str], numeric: Sequence[bool], batches: Iterable[Sequence[Sequence[str | None]]],
             ) -> int:
        """Rows (already text; None for NULL), aligned; in expanded layout (`-[ RECORD 1 ]-`) when
        the first batch's aligned table would not fit the terminal. Later batches keep the first
        one's layout and widths grow with them, as psql's FETCH_COUNT output does."""
        n, widths, expanded = 0, [len(c) for c in columns], None
        for batch in batches:
            cells = [["" if v is None else v.replace("\n", "\\n") for v in row] for row in batch]
            widths = [max([w, *(len(r[i]) for r in cells)]) for i, w in enumerate(widths)]
            if expanded is None:
                expanded = sum(widths) + 3 * len(widths) - 1 > self.width and len(columns) > 1
                if not expanded:
                    self._header(columns, widths)
            if expanded:
                self._records(columns, cells, n)
            else:
                self._aligned(cells, widths, numeric)
            n += len(cells)
            self.out.flush()
        if expanded is None:
            self._header(columns, widths)
        if expanded and n == 0:
            self.out.write("(0 rows)\n")
        elif not expanded:
            self.out.write(f"({n} row{'' if n == 1 else 's'})\n")
        self.out.write("\n")
        self.out.flush()
        return n

    def _header(self, columns: Sequence[str], widths: list[int]) -> None:
        self.out.write(" " + " | ".join(c.center(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
        self.out.write("-" + "-+-".join("-" * w for w in widths) + "-\n")

    def _aligned(self, cells: list[list[str]], widths: list[int], numeric: Sequence[bool]) -> None:
        for r in cells:
            line = " | ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(r, widths, numeric, strict=True))
            self.out.write(" " + line.rstrip() + "\n")

    def _records(self, columns: Sequence[str], cells: list[list[str]], before: int) -> None:
        name_w = max(len(c) for c in columns)
        for k, r in enumerate(cells, before + 1):
            head = f"-[ RECORD {k} ]"
            value_w = max([len(v) for v in r] + [1])
            self.out.write(head + "-" * max(0, name_w + 1 - len(head)) + "+" + "-" * (value_w + 1) + "\n"
                           if len(head) <= name_w + 1 else head + "-" * (value_w + 2) + "\n")
            for c, v in zip(columns, r, strict=True):
                self.out.write(f"{c.ljust(name_w)} | {v}".rstrip() + "\n")

    def error(self, message: str, text: str, position: int | None, detail: str | None = None,
              hint: str | None = None) -> None:
        self.out.write(f"ERROR:  {message}\n")
        if position is not None and 0 < position <= len(text) + 1:
            line, col = line_col(text, position - 1)
            src = text.split("\n")[line - 1]
            prefix = f"LINE {line}: "
            self.out.write(f"{prefix}{src}\n{' ' * (len(prefix) + col - 1)}^\n")
            self.out.write(f"(at line {line}, column {col})\n")
        if detail:
            self.out.write(f"DETAIL:  {detail}\n")
        if hint:
            self.out.write(f"HINT:  {hint}\n")
        self.out.flush()


# --- over the protocol ------------------------------------------------------------------------
def run_remote(conninfo: str, text: str, out: TextIO, err: TextIO) -> int:
    import psycopg
    from psycopg.adapt import Loader

    class _AsText(Loader):
        """psql prints the server's text, so values are kept as the server wrote them."""

        def load(self, data: bytes | bytearray | memoryview) -> str:
            return bytes(data).decode()

    printer, failed = Printer(out), Printer(err)
    try:
        conn = psycopg.connect(conninfo, autocommit=True, cursor_factory=psycopg.ClientCursor)
    except psycopg.OperationalError as e:
        err.write(f"error: cannot connect to the sparkwave server: {str(e).strip()}\n")
        return 2
    with conn:
        for t in psycopg.postgres.types:
            conn.adapters.register_loader(t.oid, _AsText)
        conn.add_notice_handler(lambda d: printer.notice(d.message_primary or ""))
        for piece in split_sql(text):
            try:
                with conn.cursor() as cur:
                    cur.execute(piece.text.encode(), prepare=False)
                    _print_cursor(printer, cur)
            except psycopg.Error as e:
                diag = e.diag
                pos = int(diag.statement_position) + piece.offset if diag.statement_position else None
                failed.error(diag.message_primary or str(e).strip(), text, pos, diag.message_detail, diag.message_hint)
                if pos is None:
                    line, col = line_col(text, piece.offset)
                    err.write(f"(in the statement at line {line}, column {col})\n")
                return 1
    return 0


def _print_cursor(printer: Printer, cur: object) -> None:
    desc = getattr(cur, "description", None)
    if desc is None:
        printer.tag(getattr(cur, "statusmessage", "") or "")
        return
    columns = [d.name for d in desc]
    numeric = [d.type_code in NUMERIC_OIDS for d in desc]

    def batches() -> Iterator[list[tuple]]:
        while batch := cur.fetchmany(FETCH_ROWS):  # type: ignore[attr-defined]
            yield batch

    printer.rows(columns, numeric, batches())


# --- embedded -----------------------------------------------------------------------------------
def run_embedded(warehouse: str, text: str, out: TextIO, err: TextIO) -> int:
    """No server: this process owns the warehouse for the statements' time, through the same
    backend a server uses (so the results print the same), and flushes before it closes."""
    from sparkwave.frontend.session import connect
    from sparkwave.frontend.statements import parse
    from sparkwave.server.backend import ServerError
    from sparkwave.server.errors import to_server_error
    from sparkwave.server.pgtypes import text_encoder
    from sparkwave.server.session_backend import SessionBackend

    printer, failed = Printer(out), Printer(err)
    try:
        parse(text)  # malformed SQL fails here, before Spark starts (about 10 s), and nothing has run
    except Exception as e:
        se = to_server_error(e, text)
        failed.error(se.message, text, se.position, se.detail, se.hint)
        return 1
    with connect(warehouse) as session:
        client = SessionBackend(session).open("sparkwave", "dev", {})
        try:
            for outcome in client.run(text):
                for n in outcome.notices:
                    printer.notice(n)
                if outcome.fields is None:
                    printer.tag(outcome.tag)
                    continue
                encoders = [text_encoder(f.type) for f in outcome.fields]
                printer.rows([f.name for f in outcome.fields], [_numeric(f.type) for f in outcome.fields],
                             ([[None if v is None else enc(v).decode() for v, enc in zip(row, encoders, strict=True)]
                               for row in _rows(b)] for b in outcome.batches))
        except ServerError as e:
            failed.error(e.message, text, e.position, e.detail, e.hint)
            return 1
        finally:
            client.close()
        session.flush()
    return 0


def _rows(batch: object) -> Iterable[Sequence[object]]:
    to_pylist = getattr(batch, "to_pylist", None)
    if to_pylist is not None:  # a pyarrow RecordBatch
        return [tuple(r.values()) for r in to_pylist()]
    return batch  # type: ignore[return-value]


def _numeric(t: object) -> bool:
    from pyspark.sql.types import NumericType

    return isinstance(t, NumericType)
