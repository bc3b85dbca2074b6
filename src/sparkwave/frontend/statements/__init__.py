"""SQL statements as typed nodes: `parse` splits SQL text into statements and parses each into
its node (`nodes.py`), each kind by a small parser chosen by its leading keyword (`parser.py`,
`create.py`); sqlglot parses the standard SQL (`sql.py`), with every function and clause checked.

The RisingWave statements sqlglot does not know (`FLUSH`, `SHOW JOBS`, `APPEND ONLY`, connector
`WITH (...)` options, ...) are recognised here first. Every error names the statement and its
line and column in the submitted text."""

from sparkwave.frontend.statements.nodes import (
                                                 AlterBackfillRate,
                                                 AlterSinkRate,
                                                 AlterSourceRate,
                                                 Cancel,
                                                 CreateMaterializedView,
                                                 CreateSink,
                                                 CreateSource,
                                                 CreateTable,
                                                 Delete,
                                                 Describe,
                                                 Drop,
                                                 DropMaterializedView,
                                                 DropSink,
                                                 DropSource,
                                                 DropTable,
                                                 Explain,
                                                 Flush,
                                                 Insert,
                                                 Query,
                                                 Set,
                                                 Show,
                                                 Statement,
                                                 Update,
                                                 Wait,
                                                 rate_limit_value,
)
from sparkwave.frontend.statements.parser import parse, parse_one
from sparkwave.frontend.statements.sql import split

__all__ = ["AlterBackfillRate", "AlterSinkRate", "AlterSourceRate", "Cancel", "CreateMaterializedView", "CreateSink",
           "CreateSource", "CreateTable", "Delete", "Describe", "Drop", "DropMaterializedView", "DropSink",
           "DropSource", "DropTable", "Explain", "Flush", "Insert", "Query", "Set", "Show", "Statement", "Update",
           "Wait", "parse", "parse_one", "rate_limit_value", "split"]
