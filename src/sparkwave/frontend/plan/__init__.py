"""The planner, as passes around a shared scope (the shape of sqlglot's optimizer).

- `planner.py`: the driver (`Planner.plan`), a short list of passes;
- `closed_world.py`: every clause of the query consumed or refused by name;
- `context.py`: what every pass shares (statement, catalog lookup, type oracle, name counters);
- `scope.py`: the FROM items a SELECT sees and how a column name resolves;
- `select.py`: one SELECT; `joins.py`: FROM and joins; `sources.py`: tables, windows, VALUES;
- `aggregates.py`, `string_aggs.py`, `decimals.py`: GROUP BY and aggregate calls;
- `windows.py`: window functions; `keys.py`: the MV's columns and key;
- `types.py`: `TypeOracle` (Spark's analyser) and `static_types.py` (Spark's rules, no JVM);
- `explain.py`: the operator tree as text (`EXPLAIN`).

Nothing is imported here, so that `statements.py` can use `closed_world` without the planner."""
