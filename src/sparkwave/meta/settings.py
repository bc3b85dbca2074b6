"""The warehouse's settings (`SET key = value`): stored as text in the catalog so that they survive a
restart, read through one typed object so that no caller parses strings. Each setting is parsed
when it is read, so one bad stored value fails only what uses it, with an error naming it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkwave.connectors.options import MAX_RATE
from sparkwave.core import policy
from sparkwave.core.catalog import Catalog
from sparkwave.core.errors import SparkwaveError
from sparkwave.meta.creating_job import Strategy

MAX_RETENTION_SECONDS = 10 * 365 * 86_400  # ten years


def _seconds(high: int) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not (math.isfinite(value) and 0 <= value <= high):
            raise ValueError
        return value
    return parse


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"[-+]?[0-9]{1,30}", text):
            raise ValueError
        value = int(text)
        if not low <= value <= high:
            raise ValueError
        return value
    return parse


def _range(low: int, high: int, unit: str = "") -> str:
    return f"an integer from {low} to {high}{unit}"


def _bool(text: str) -> bool:
    if text not in ("true", "false", "on", "off"):
        raise ValueError
    return text in ("true", "on")


def rate_limit(text: str) -> int | None:
    """Rows per second (0 pauses), or None for DEFAULT (unlimited)."""
    if text.lower() == "default":
        return None
    return _count(0, MAX_RATE)(text)


@dataclass(frozen=True)
class _Spec:
    default: str
    parse: Callable[[str], Any]
    expects: str  # completes "setting X must be ..."
    doc: str
    unknown: str | None = None  # the error for a value outside a closed set, with {text}

    def error(self, key: str, text: str) -> str:
        if self.unknown:
            return self.unknown.format(text=repr(text))
        return f"setting {key} must be {self.expects}, got {text if len(text) <= 40 else text[:37] + '...'!r}"


SPECS: dict[str, _Spec] = {
    "retention_seconds": _Spec("3600", _seconds(MAX_RETENTION_SECONDS),
                               f"a non-negative number of seconds from 0 to {MAX_RETENTION_SECONDS} (10 years)",
                               "how long committed epochs stay readable with as_of"),
    "compaction_epochs": _Spec("50", _count(0, 10**6), _range(0, 10**6),
                               "log epochs since the base that trigger a compaction"),
    "backfill_strategy": _Spec("snapshot", Strategy, f"one of {', '.join(Strategy)}",
                               "how CREATE MATERIALIZED VIEW fills a new MV",
                               "unknown backfill strategy {text}; supported: " + ", ".join(Strategy)),
    "background_ddl": _Spec("false", _bool, "true or false",
                            "true: CREATE MATERIALIZED VIEW returns at once; the job backfills in the background"),
    "backfill_rate_limit": _Spec("default", rate_limit, _range(0, MAX_RATE, " (rows per second) or DEFAULT"),
                                 "rows per second per new creating job; default = unlimited, 0 = paused"),
    "dml_rows_per_epoch": _Spec("1000000", _count(1, 10**8), _range(1, 10**8),
                                "at most this many DML rows per epoch: a larger statement or bulk load spans epochs"),
    "big_epoch_rows": _Spec(str(policy.BIG_EPOCH_ROWS), _count(0, 10**10), _range(0, 10**10),
                            "a table's or MV's step whose change in an epoch has more rows than this runs on the "
                            "Spark executors (joins and aggregates against their state files), not the driver"),
    "backfill_chunk_rows": _Spec("10000000", _count(1, 10**9), _range(1, 10**9),
                                 "at most this many snapshot rows per checkpoint of a creating job"),
    "sink_decouple": _Spec("true", _bool, "true or false",
                           "true: a new sink runs at its own pace behind its log store; false: each epoch waits "
                           "for it"),
    "delta_lag_epochs": _Spec("10", _count(1, 1000), _range(1, 1000),
                              "how many committed epochs the relations' Delta logs (for readers outside sparkwave) "
                              "may trail the catalog: each gets a Delta version per group of about half as many "
                              "epochs (or every 5 s); the pipeline waits beyond it"),
    "statement_timeout": _Spec("0", _count(0, 2**31 - 1), _range(0, 2**31 - 1, " (milliseconds; 0: no timeout)"),
                               "per session, not stored (PostgreSQL's): a query or DML statement that runs longer "
                               "is cancelled"),
}


class Settings:
    """Typed access to the settings stored in a warehouse's catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    @property
    def retention_seconds(self) -> float:
        return float(self._get("retention_seconds"))

    @property
    def compaction_epochs(self) -> int:
        return int(self._get("compaction_epochs"))

    @property
    def backfill_strategy(self) -> Strategy:
        return Strategy(self._get("backfill_strategy"))

    @property
    def background_ddl(self) -> bool:
        return bool(self._get("background_ddl"))

    @property
    def backfill_rate_limit(self) -> int | None:
        value = self._get("backfill_rate_limit")
        return None if value is None else int(value)

    @property
    def dml_rows_per_epoch(self) -> int:
        return int(self._get("dml_rows_per_epoch"))

    @property
    def big_epoch_rows(self) -> int:
        return int(self._get("big_epoch_rows"))

    @property
    def backfill_chunk_rows(self) -> int:
        return int(self._get("backfill_chunk_rows"))

    @property
    def delta_lag_epochs(self) -> int:
        return int(self._get("delta_lag_epochs"))

    @property
    def sink_decouple(self) -> bool:
        return bool(self._get("sink_decouple"))

    def _get(self, key: str) -> Any:
        spec = SPECS[key]
        text = self.catalog.setting(f"config.{key}", spec.default) or spec.default
        try:
            return spec.parse(text)
        except (ValueError, OverflowError):
            raise SparkwaveError(f"the stored setting {key} = {text!r} is invalid: it needs {spec.expects}; "
                                 f"SET it again") from None

    def store(self, key: str, text: str) -> None:
        """Check and store `SET key = text`. Raises `ValueError` saying what was expected."""
        spec = SPECS[key]
        try:
            value = spec.parse(text)
        except (ValueError, OverflowError):
            raise ValueError(spec.error(key, text)) from None
        self.catalog.set_setting(f"config.{key}", "default" if value is None else _text(value, text))


def _text(value: Any, text: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return text  # as written: str() of a float may read differently
    return str(value)
