"""The functions SQL may call, in one table, and the bound on how deep an expression may nest.

`FUNCTIONS` maps each function sparkwave documents, keyed by how sqlglot parses it (a typed
expression class, or the lower-case name of an `exp.Anonymous`), to the names a user may call it
by, the Spark function or translation it runs as, and whether it is deterministic. `check` refuses
any call outside the table when a statement is parsed, so nothing else a Spark session could run
(`reflect`, `java_method`, file readers, `current_user` ...) is reachable from SQL: an allowlist
by construction, not a list of what to refuse. The README's Functions section lists the same set.

Nesting is bounded before anything recurses on it: sqlglot's parser and SQL generator, sparkwave's
translation and Spark's own parser and code generator all recurse once per level, so a statement
past `MAX_EXPRESSION_DEPTH` is refused with an error naming the limit instead of exhausting a stack
(a raw `RecursionError`, a JVM `StackOverflowError`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from sparkwave.core.errors import SqlError
from sparkwave.core.limits import MAX_EXPRESSION_DEPTH

# sqlglot's parser spends about 25 Python frames per level of nesting (a call, a parenthesis);
# the interpreter's default of 1,000 would stop near 40 levels, below the documented limit.
# Python 3.11 keeps Python-to-Python calls off the C stack, so this costs memory only when used.
RECURSION_LIMIT = 40 * MAX_EXPRESSION_DEPTH + 5_000


@dataclass(frozen=True)
class Function:
    names: tuple[str, ...]  # as a user calls it; empty for a Func sqlglot builds from syntax alone
    group: str  # string | math | date/time | conditional | aggregate | window | table | operator | other
    spark: str  # the Spark function it runs as, or where sparkwave translates it
    deterministic: bool = True


_PG = "translated in frontend/pg_functions.py"
_POSTGRES = "translated in frontend/postgres.py"

FUNCTIONS: dict[type[exp.Expr] | str, Function] = {
    # string
    exp.Upper: Function(("upper",), "string", "upper"),
    exp.Lower: Function(("lower",), "string", "lower"),
    exp.Initcap: Function(("initcap",), "string", f"initcap, {_PG}"),
    exp.Length: Function(("length", "char_length", "character_length"), "string", "length"),
    "octet_length": Function(("octet_length",), "string", "octet_length"),
    exp.BitLength: Function(("bit_length",), "string", "bit_length"),
    exp.Substring: Function(("substr", "substring"), "string", f"substr, {_PG}"),
    exp.Left: Function(("left",), "string", f"left, {_PG}"),
    exp.Right: Function(("right",), "string", f"right, {_PG}"),
    exp.Trim: Function(("trim", "btrim", "ltrim", "rtrim"), "string", "trim, ltrim, rtrim"),
    exp.Pad: Function(("lpad", "rpad"), "string", "lpad, rpad"),
    exp.Replace: Function(("replace",), "string", "replace"),
    exp.Repeat: Function(("repeat",), "string", "repeat"),
    exp.Reverse: Function(("reverse",), "string", "reverse"),
    exp.Translate: Function(("translate",), "string", "translate"),
    exp.Concat: Function(("concat",), "string", "concat"),
    exp.ConcatWs: Function(("concat_ws",), "string", "concat_ws"),
    exp.StrPosition: Function(("position", "strpos"), "string", "locate"),
    exp.SplitPart: Function(("split_part",), "string", "split_part"),
    exp.Ascii: Function(("ascii",), "string", "ascii"),
    exp.Chr: Function(("chr", "char"), "string", "chr"),
    exp.StartsWith: Function(("starts_with",), "string", "startswith"),
    exp.MD5: Function(("md5",), "string", "md5"),
    exp.RegexpReplace: Function(("regexp_replace",), "string", f"regexp_replace, {_PG}"),
    exp.RegexpLike: Function(("regexp_like",), "string", "rlike (also the operators ~ and !~)"),
    "to_char": Function(("to_char",), "string", f"date_format, to_char, {_POSTGRES}"),
    exp.Encode: Function(("encode",), "string", f"hex, base64, {_POSTGRES}"),
    exp.Decode: Function(("decode",), "string", f"unhex, unbase64, {_POSTGRES}"),
    # math
    exp.Abs: Function(("abs",), "math", f"abs, {_PG}"),
    exp.Round: Function(("round",), "math", f"round, bround, {_PG}"),
    exp.Ceil: Function(("ceil", "ceiling"), "math", "ceil"),
    exp.Floor: Function(("floor",), "math", "floor"),
    exp.Sign: Function(("sign",), "math", "sign"),
    exp.Sqrt: Function(("sqrt",), "math", "sqrt"),
    exp.Cbrt: Function(("cbrt",), "math", "cbrt"),
    exp.Exp: Function(("exp",), "math", "exp"),
    exp.Ln: Function(("ln",), "math", "ln"),
    exp.Log: Function(("log", "log10"), "math", f"log10, log, {_PG}"),
    exp.Pow: Function(("power",), "math", "power (also the operator ^)"),
    exp.Pi: Function(("pi",), "math", "pi"),
    exp.Degrees: Function(("degrees",), "math", "degrees"),
    exp.Radians: Function(("radians",), "math", "radians"),
    exp.Sin: Function(("sin",), "math", "sin"),
    exp.Cos: Function(("cos",), "math", "cos"),
    exp.Tan: Function(("tan",), "math", "tan"),
    exp.Asin: Function(("asin",), "math", "asin"),
    exp.Acos: Function(("acos",), "math", "acos"),
    exp.Atan: Function(("atan",), "math", "atan"),
    exp.Atan2: Function(("atan2",), "math", "atan2"),
    exp.Rand: Function(("random",), "math", "rand", deterministic=False),
    # date/time
    exp.Extract: Function(("extract", "date_part"), "date/time", f"extract, {_PG}, {_POSTGRES}"),
    exp.TimestampTrunc: Function(("date_trunc",), "date/time", "date_trunc"),
    "timezone": Function(("timezone",), "date/time", f"to_utc_timestamp, from_utc_timestamp, {_PG}"),
    "make_date": Function(("make_date",), "date/time", "make_date"),
    exp.TimestampFromParts: Function(("make_timestamp",), "date/time", "make_timestamp"),
    exp.UnixToTime: Function(("to_timestamp",), "date/time", "from_unixtime"),
    exp.CurrentTimestamp: Function(("now", "current_timestamp"), "date/time", "current_timestamp",
                                   deterministic=False),
    exp.CurrentDate: Function(("current_date",), "date/time", "current_date", deterministic=False),
    "proctime": Function(("proctime",), "date/time", "FOR SYSTEM_TIME AS OF PROCTIME() only: a temporal join",
                         deterministic=False),
    # conditional
    exp.Case: Function(("case",), "conditional", "CASE"),
    exp.If: Function((), "conditional", "CASE's WHEN branches"),
    exp.Coalesce: Function(("coalesce",), "conditional", "coalesce"),
    exp.Nullif: Function(("nullif",), "conditional", "nullif"),
    exp.Greatest: Function(("greatest",), "conditional", "greatest"),
    exp.Least: Function(("least",), "conditional", "least"),
    # aggregate
    exp.Count: Function(("count",), "aggregate", "count"),
    exp.Sum: Function(("sum",), "aggregate", "sum"),
    exp.Avg: Function(("avg",), "aggregate", "avg"),
    exp.Min: Function(("min",), "aggregate", "min"),
    exp.Max: Function(("max",), "aggregate", "max"),
    exp.LogicalAnd: Function(("bool_and",), "aggregate", "bool_and"),
    exp.LogicalOr: Function(("bool_or",), "aggregate", "bool_or"),
    "every": Function(("every",), "aggregate", "every"),
    exp.GroupConcat: Function(("string_agg",), "aggregate", "string_agg"),
    exp.Grouping: Function(("grouping",), "aggregate", "a constant per grouping set: frontend/plan/grouping_sets.py"),
    exp.PercentileCont: Function(("percentile_cont",), "aggregate", f"sort_array(collect_list(...)), {_PG}"),
    exp.PercentileDisc: Function(("percentile_disc",), "aggregate", f"sort_array(collect_list(...)), {_PG}"),
    exp.Mode: Function(("mode",), "aggregate", "mode(x, true)"),
    exp.Stddev: Function(("stddev",), "aggregate", "stddev"),
    exp.StddevSamp: Function(("stddev_samp",), "aggregate", "stddev_samp"),
    exp.StddevPop: Function(("stddev_pop",), "aggregate", "stddev_pop"),
    exp.Variance: Function(("variance", "var_samp"), "aggregate", "variance"),
    exp.VariancePop: Function(("var_pop",), "aggregate", "var_pop"),
    # window
    exp.RowNumber: Function(("row_number",), "window", "row_number"),
    exp.Rank: Function(("rank",), "window", "rank"),
    exp.DenseRank: Function(("dense_rank",), "window", "dense_rank"),
    exp.PercentRank: Function(("percent_rank",), "window", "percent_rank"),
    exp.CumeDist: Function(("cume_dist",), "window", "cume_dist"),
    exp.Ntile: Function(("ntile",), "window", "ntile"),
    exp.Lag: Function(("lag",), "window", "lag"),
    exp.Lead: Function(("lead",), "window", "lead"),
    exp.FirstValue: Function(("first_value",), "window", "first_value"),
    exp.LastValue: Function(("last_value",), "window", "last_value"),
    exp.NthValue: Function(("nth_value",), "window", "nth_value"),
    # table functions (a FROM item)
    "hop": Function(("hop",), "table", "planned as a windowed scan (frontend/planner.py)"),
    "tumble": Function(("tumble",), "table", "planned as a windowed scan (frontend/planner.py)"),
    # set-returning: a FROM item, or in a SELECT list (`_SETS`); a project set (frontend/plan/project_set.py)
    exp.ExplodingGenerateSeries: Function(("generate_series",), "table", "sequence, in a project set"),
    exp.Explode: Function(("unnest",), "table", "a project set (in a SELECT list)"),
    exp.Unnest: Function(("unnest",), "table", "a project set (in FROM)"),
    # operators that sqlglot parses as functions (the others are not `exp.Func`: never refused)
    exp.And: Function(("and",), "operator", "AND"),
    exp.Or: Function(("or",), "operator", "OR"),
    exp.Mod: Function(("mod",), "operator", "% (mod(a, b) is the operator, not a call, to sqlglot)"),
    # other
    exp.Cast: Function(("cast",), "other", f"CAST (also x::type and type 'text'), {_PG}, {_POSTGRES}"),
    exp.Exists: Function(("exists",), "other", "EXISTS (subquery), planned as a semi join"),
    "raise_error": Function(("raise_error",), "other", "raise_error"),
    exp.Array: Function(("array",), "other", "array (ARRAY[a, b]: for unnest; arrays are not a column type)"),
    exp.Uuid: Function(("gen_random_uuid",), "other", "uuid", deterministic=False),
}

# why a name often asked for is not in the set
_HINTS = {"array_agg": "arrays are not a column type in sparkwave (left out on purpose); "
                       "string_agg(x::varchar, ',' ORDER BY ...) keeps the values as text"}
_FROM_ITEM = (exp.Table, exp.Lateral, exp.From, exp.Join)
_SETS = (exp.ExplodingGenerateSeries, exp.Explode)  # table functions that a SELECT list may call too
# Names Spark's analyzer reads, when no column has them, as a value of the session or the host
# (its LiteralFunctionResolution, and the grouping id): a bare column of that name is refused, so
# no statement reaches them by naming a column that is not there.
_SPARK_NAMES = frozenset({"user", "current_user", "session_user", "current_date", "current_time",
                          "current_timestamp", "grouping__id"})


def function_of(node: exp.Func) -> Function | None:
    return FUNCTIONS.get(node.name.lower() if isinstance(node, exp.Anonymous) else type(node))


def check(ast: exp.Expr, text: str, error: Callable[[str, str | None], SqlError]) -> None:
    """Refuse `ast`, parsed from `text`, if it nests deeper than MAX_EXPRESSION_DEPTH or calls a
    function outside FUNCTIONS; `error(message, word)` makes the error pointing at `word`."""
    stack = [(ast, 1)]
    while stack:  # iterative: the tree may be deep
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise error(too_deep(), None)
        if isinstance(node, exp.Func):
            _check_call(node, text, error)
        elif isinstance(node, exp.Parameter | exp.Placeholder | exp.SessionParameter):
            raise error(f"parameters are not supported: {node.sql(dialect='postgres')}", None)
        elif isinstance(node, exp.Table) and (node.args.get("db") or node.args.get("catalog")):
            raise error(f"schema-qualified table names are not supported: {node.sql(dialect='postgres')}", None)
        elif isinstance(node, exp.Column) and not node.table and node.name.lower() in _SPARK_NAMES:
            raise error(f"column {node.name} must be qualified (t.{node.name}): Spark reads the bare name "
                        f"{node.name} as a value of the session, not a column", node.name)
        elif isinstance(node, exp.Any | exp.All) and not isinstance(node.parent, exp.Predicate):
            raise error(f"function {node.key} is not supported: ANY and ALL compare (x = ANY (subquery))",
                        node.key)
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _check_call(node: exp.Func, text: str, error: Callable[[str, str | None], SqlError]) -> None:
    fn = function_of(node)
    name = called_name(node, text)
    if isinstance(node, exp.If) and not isinstance(node.parent, exp.Case):
        name = name or "if"  # IF(c, a, b), not a WHEN branch of CASE
        fn = None
    shown = name or (fn.names[0] if fn and fn.names else node.sql_name().lower())
    if isinstance(node.parent, exp.Dot) and node.arg_key == "expression":
        raise error(f"function {node.parent.sql(dialect='postgres').split('(')[0]} is not supported: "
                    "function names are not qualified", shown)
    if fn is None or (name is not None and name.lower() not in fn.names):
        hint = _HINTS.get(shown.lower())
        raise error(f"function {shown} is not supported" + (f": {hint}" if hint else "; see the README's "
                                                            "Functions section for those that are"), shown)
    if fn.names == ("proctime",) and not isinstance(node.parent, exp.Version):
        raise error("PROCTIME() is supported only in a temporal join of a materialized view: "
                    "[LEFT] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k; or as a table's column, "
                    "CREATE TABLE t (..., p TIMESTAMPTZ AS PROCTIME()), set to the time of the epoch that applies "
                    "each row", shown)
    in_from = isinstance(node.parent, _FROM_ITEM) and node.arg_key == "this"  # not a JOIN's ON
    if fn.group == "table" and not in_from and not isinstance(node, _SETS):
        raise error(f"{shown} is a table function: it may only be a FROM item", shown)
    if in_from and fn.group != "table":
        raise error(f"function {shown} is not a table function (supported in FROM: HOP, TUMBLE, generate_series, "
                    "unnest)", shown)


def called_name(node: exp.Func, text: str) -> str | None:
    """The name `node` was called by in `text`, or None for a node sqlglot built from syntax
    (`x::int`, `CASE`, `EXTRACT(... FROM ...)`)."""
    if isinstance(node, exp.Anonymous):
        return node.name
    start, end = node.meta.get("start"), node.meta.get("end")
    if start is None or end is None:
        return None
    name = text[start:end + 1]
    return name if name.replace("_", "a").isalnum() else None


def too_deep() -> str:
    return (f"expression nested too deeply: more than {MAX_EXPRESSION_DEPTH} levels of operators, calls, "
            "parentheses and subqueries; simplify it (a long chain of AND/OR/+ counts a level per term: "
            "use IN (...) or split it)")


def check_nesting(tokens: Iterable[Token], error: Callable[[str, str | None], SqlError]) -> None:
    """Refuse text whose parentheses and CASEs nest deeper than the limit before it is parsed:
    the parser recurses on them."""
    depth = 0
    for t in tokens:
        if t.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.CASE):
            depth += 1
            if depth > MAX_EXPRESSION_DEPTH:
                raise error(too_deep(), None)
        elif t.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.END):
            depth -= 1


def documented() -> dict[str, list[str]]:
    """Every name a user may call, by group (the README's Functions section)."""
    groups: dict[str, list[str]] = {}
    for fn in FUNCTIONS.values():
        groups.setdefault(fn.group, []).extend(fn.names)
    return groups


if sys.getrecursionlimit() < RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)
