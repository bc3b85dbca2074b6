"""A pytest plugin recording every MV the tests plan, with the schemas it read and Spark's plan
(`SPARKWAVE_RECORD_PLANS=cases.jsonl pytest -n 0 -p tests.planner.recorder tests/integration/test_x.py`); see
`tests/planner/golden.py`."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from sparkwave.core.errors import SparkwaveError
from sparkwave.frontend.plan.explain import explain
from sparkwave.frontend.plan.planner import Planner
from sparkwave.frontend.statements import CreateMaterializedView
from tests.planner.golden import normalized, relation_line

_current: dict[str, Any] = {"test": "", "count": 0}


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("SPARKWAVE_RECORD_PLANS")
    if not path:
        return
    original = Planner.plan

    def plan(self: Planner, query: Any) -> Any:
        stmt = self.ctx.stmt
        looked: dict[str, Any] = {}
        lookup = self.ctx.lookup

        def recording(name: str) -> Any:
            rel = lookup(name)
            looked[name] = rel
            return rel

        self.ctx.lookup = recording
        expected: list[str]
        try:
            result = original(self, query)
            expected = explain(stmt.name if isinstance(stmt, CreateMaterializedView) else "query", result)
            return result
        except SparkwaveError as e:
            expected = [f"ERROR: {normalized(str(e))}"]
            raise
        finally:
            if isinstance(stmt, CreateMaterializedView):
                _current["count"] += 1
                with open(path, "a") as f:
                    f.write(json.dumps({"case": f"{_current['test']}/{stmt.name}",
                                        "relations": [relation_line(r) for r in looked.values()],
                                        "sql": stmt.text, "expected": expected}) + "\n")

    Planner.plan = plan  # type: ignore[method-assign]


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current["test"] = item.nodeid.split("::")[-1]
