"""Golden plans, without Spark: every case of `tests/planner/*.plan` (the Nexmark and TPC-H queries,
and the MVs the SQL-surface tests create, with the schemas they read) planned again with the
Spark-free type oracle gives the plan text Spark's analyser gave when the case was recorded
(`tests/planner/golden.py`). `SPARKWAVE_UPDATE_GOLDEN=1` rewrites the files from what the planner
gives now, for a change meant to alter plans (review the diff)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkwave.frontend.plan.static_types import StaticTypes
from tests.planner import golden

UPDATE = os.environ.get("SPARKWAVE_UPDATE_GOLDEN") == "1"
FILES = {path: golden.read(path) for path in golden.files()}
CASES = [(path, i) for path, cases in FILES.items() for i in range(len(cases))]


@pytest.mark.parametrize(("path", "index"), CASES, ids=[FILES[p][i].name for p, i in CASES])
def test_plan_is_golden(path: Path, index: int) -> None:
    case = FILES[path][index]
    got = golden.render(case, StaticTypes())
    if UPDATE and got != case.expected:  # rewritten, to be reviewed as a diff
        case.expected = got
        golden.write(path, FILES[path])
        return
    assert got == case.expected, "\n".join(["plan differs from the golden one:", *got])


def test_the_corpus_covers_nexmark_tpch_and_the_sql_surface() -> None:
    assert {p.stem for p in FILES} >= {"nexmark", "tpch", "sql", "sql_semantics", "errors", "functions", "oracle"}
    assert len(CASES) > 100
    plans = [c for cases in FILES.values() for c in cases if not c.expected[0].startswith("ERROR")]
    ops = {line.strip().split("(")[0] for c in plans for line in c.expected}
    assert ops >= {"Materialize", "Project", "Scan", "Join", "Aggregate", "Over", "Share", "Values"}


def test_planning_the_corpus_starts_no_jvm() -> None:
    """In a fresh interpreter whose JVM gateway cannot start, every case still plans as golden."""
    # SparkContext calls its own reference to launch_gateway (pyspark.core.context): both are replaced
    code = ("import pyspark.java_gateway as g, pyspark.core.context as c\n"
            "def refuse(*a, **k): raise AssertionError('planning started a JVM')\n"
            "g.launch_gateway = c.launch_gateway = refuse\n"
            "from sparkwave.frontend.plan.static_types import StaticTypes\n"
            "from tests.planner import golden\n"
            "bad = [c.name for p in golden.files() for c in golden.read(p) if golden.render(c, StaticTypes()) != "
            "c.expected]\n"
            "assert not bad, bad\n"
            "from pyspark import SparkContext\n"
            "assert SparkContext._gateway is None\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
