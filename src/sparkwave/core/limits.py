"""The documented bounds on what one statement or record may ask of the warehouse: past them the
input is refused (a statement) or set aside as a bad record (a source's message), so that no single
input can exhaust the driver's memory or stack. The README lists them."""

from __future__ import annotations

MAX_VALUE_BYTES = 16 * 1024 * 1024  # one text or bytea value (PostgreSQL's own limit is 1 GB)
# nesting of one statement's expressions (operators, calls, parentheses, subqueries), counted in
# parsed nodes: Spark's own parser gives up near 200 nested calls or subqueries on the driver's
# stack, and a translated function may add a level, so 128 leaves room
MAX_EXPRESSION_DEPTH = 128
MAX_JSON_DEPTH = 128  # nesting of one JSON message's arrays and objects (serde_json's, so RisingWave's, limit)
MAX_STATEMENT_BYTES = 64 * 1024 * 1024  # the text of one call to sql(): what the parser holds at once
MAX_SHOW_ROWS = 10_000  # rows one SHOW lists (SHOW SOURCE ERRORS: the first, in offset order)
