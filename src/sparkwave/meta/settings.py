"""The warehouse's settings (`SET key = value`): stored as text in the catalog so that they survive a
restart, read back as one typed object so that no caller parses strings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from sparkwave.core.catalog import Catalog
from sparkwave.meta.creating_job import Strategy


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _bool(text: str) -> bool:
    if text not in ("true", "false", "on", "off"):
        raise ValueError
    return text in ("true", "on")


def _rate(text: str) -> int | None:
    if text == "default":
        return None
    value = int(text)
    if value < 0:
        raise ValueError
    return value


@dataclass(frozen=True)
class _Spec:
    default: str
    parse: Callable[[str], Any]
    expects: str
    doc: str

    def error(self, key: str, text: str) -> str:
        if key == "backfill_strategy":
            return f"unknown backfill strategy {text!r}; supported: {', '.join(Strategy)}"
        return f"setting {key} needs {self.expects}, got {text!r}"


SPECS: dict[str, _Spec] = {
    "retention_seconds": _Spec("3600", _non_negative, "a non-negative number",
                               "how long committed epochs stay readable with as_of"),
    "compaction_epochs": _Spec("50", lambda t: int(_non_negative(t)), "a non-negative number",
                               "log epochs since the base that trigger a compaction"),
    "backfill_strategy": _Spec("snapshot", Strategy, f"one of {', '.join(Strategy)}",
                               "how CREATE MATERIALIZED VIEW fills a new MV"),
    "background_ddl": _Spec("false", _bool, "true or false",
                            "true: CREATE MATERIALIZED VIEW returns at once; the job backfills in the background"),
    "backfill_rate_limit": _Spec("default", _rate, "a non-negative integer or DEFAULT",
                                 "rows per second per new creating job; default = unlimited, 0 = paused"),
    "backfill_chunk_rows": _Spec("10000000", _positive_int, "a positive integer",
                                 "at most this many snapshot rows per checkpoint of a creating job"),
}


@dataclass(frozen=True)
class Settings:
    retention_seconds: float
    compaction_epochs: int
    backfill_strategy: Strategy
    background_ddl: bool
    backfill_rate_limit: int | None
    backfill_chunk_rows: int

    @staticmethod
    def load(catalog: Catalog) -> Settings:
        """The current settings; a value stored by an older version that no longer parses is an error
        naming it (never silently the default)."""
        values = {f.name: SPECS[f.name].parse(catalog.setting(f"config.{f.name}", SPECS[f.name].default)
                                              or SPECS[f.name].default) for f in fields(Settings)}
        return Settings(**values)

    @staticmethod
    def store(catalog: Catalog, key: str, text: str) -> Any:
        """Check and store `SET key = text`; returns the typed value. Raises `KeyError` for an unknown
        key and `ValueError` (saying what was expected) for a bad value."""
        spec = SPECS[key]
        try:
            value = spec.parse(text)
        except ValueError:
            raise ValueError(spec.error(key, text)) from None
        catalog.set_setting(f"config.{key}", "default" if value is None else _text(value))
        return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
