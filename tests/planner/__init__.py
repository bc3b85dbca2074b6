"""Golden planner tests: SQL in, plan text out (tests/unit/test_planner_golden.py)."""
