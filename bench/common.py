"""Shared helpers: one SparkSession per run, fresh warehouses, percentiles, result lines."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sparkwave.core.spark import create_spark

_spark = None


def spark():
    global _spark
    if _spark is None:
        _spark = create_spark()
    return _spark


def fresh_dir(name: str) -> Path:
    d = Path(tempfile.gettempdir()) / "sparkwave-bench" / name
    shutil.rmtree(d, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    return d


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(title: str, lines: list[str]) -> str:
    text = f"### {title}\n\n" + "\n".join(lines) + "\n"
    print(text, flush=True)
    return text
