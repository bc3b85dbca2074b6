"""Golden planner tests: SQL in, plan text out (tests/test_planner_golden.py)."""
