"""Connector options: each connector and sink target declares every option it takes (name, type,
range, default) in one `Options` spec. CREATE and ALTER check a statement's options against it
before anything is recorded, so no option reaches an outside library (librdkafka, delta-rs,
psycopg) unchecked; a connector reads its options typed through the spec."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from sparkwave.core.errors import SqlError

MAX_TEXT = 1024  # characters of a text option (PEM certificates take `long_text`)
MAX_LONG_TEXT = 65536
MAX_RATE = 10**9  # rows per second of a rate limit (source_rate_limit, sink_rate_limit, ...)
MAX_GENERATOR_RATE = 10**12  # rows per second a generator (datagen, nexmark) may be asked for
DEFAULT_MAX_ROWS_PER_EPOCH = 200_000
MAX_ROWS_PER_EPOCH = 10**8
_INTEGER = re.compile(r"[-+]?[0-9]{1,40}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Opt:
    """One option. A `*` in `name` stands for one dot-free part (`fields.*.kind`)."""

    name: str
    kind: str  # int | number | bool | enum | text
    default: str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    max_len: int = MAX_TEXT
    secret: bool = False  # its value is never shown in an error

    def allowed(self) -> str:
        """What a value must be, completing "option X must be ..."."""
        if self.kind == "int":
            return f"an integer from {_num(self.low)} to {_num(self.high)}"
        if self.kind == "number":
            return f"a number from {_num(self.low)} to {_num(self.high)}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "enum":
            return "one of " + ", ".join(f"'{c}'" for c in self.choices)
        return f"text of at most {self.max_len} characters without control characters"

    def parse(self, text: str) -> Any:
        """The typed value of `text`; ValueError if it is not one this option takes."""
        if self.kind == "int":
            if not _INTEGER.fullmatch(text):
                raise ValueError
            value: Any = int(text)
        elif self.kind == "number":
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
        elif self.kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        elif self.kind == "enum":
            for c in self.choices:
                if c.lower() == text.lower():
                    return c
            raise ValueError
        else:
            multiline = self.max_len == MAX_LONG_TEXT  # PEM text: lines
            if len(text) > self.max_len or _CONTROL.search(re.sub(r"[\n\r\t]", "", text) if multiline else text):
                raise ValueError
            return text
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise ValueError
        return value


def _num(x: float | None) -> str:
    return "any" if x is None else str(int(x)) if float(x).is_integer() else str(x)


def integer(name: str, low: int, high: int, default: int | None = None) -> Opt:
    return Opt(name, "int", None if default is None else str(default), low, high)


def number(name: str, low: float, high: float, default: float | None = None) -> Opt:
    return Opt(name, "number", None if default is None else str(default), low, high)


def boolean(name: str, default: bool | None = None) -> Opt:
    return Opt(name, "bool", None if default is None else str(default).lower())


def choice(name: str, *choices: str, default: str | None = None) -> Opt:
    return Opt(name, "enum", default, choices=choices)


def text(name: str, default: str | None = None, secret: bool = False, long: bool = False) -> Opt:
    return Opt(name, "text", default, max_len=MAX_LONG_TEXT if long else MAX_TEXT, secret=secret)


def rate_limit(name: str) -> Opt:
    """Rows per second (0 pauses); absent: unlimited."""
    return integer(name, 0, MAX_RATE)


def max_rows_per_epoch() -> Opt:
    """The most rows a source takes into one epoch, however high its rate or backlog."""
    return integer("max.rows.per.epoch", 1, MAX_ROWS_PER_EPOCH, DEFAULT_MAX_ROWS_PER_EPOCH)


class Options:
    """The options one connector takes."""

    def __init__(self, connector: str, *opts: Opt) -> None:
        self.connector = connector
        self.opts = {o.name: o for o in opts}
        self._patterns = [(re.compile(re.escape(o.name).replace(r"\*", r"[^.]+")), o) for o in opts if "*" in o.name]

    def find(self, key: str) -> Opt | None:
        if (opt := self.opts.get(key)) is not None:
            return opt
        return next((o for p, o in self._patterns if p.fullmatch(key)), None)

    def names(self) -> str:
        return ", ".join(n.replace("*", "<column>") for n in self.opts)

    def check(self, where: str, options: dict[str, str]) -> dict[str, Any]:
        """The typed value of every option given; SqlError naming `where`, the option and what it
        allows if one is not this connector's or its value is out of its type or range."""
        values: dict[str, Any] = {}
        for key, raw in options.items():
            opt = self.find(key)
            if opt is None:
                raise SqlError(f"{where}: option {key} is not allowed for the {self.connector} connector; "
                               f"allowed: {self.names()}")
            try:
                values[key] = opt.parse(raw)
            except (ValueError, OverflowError):
                shown = "'***'" if opt.secret else repr(raw if len(raw) <= 80 else raw[:77] + "...")
                raise SqlError(f"{where}: option {key} must be {opt.allowed()}, got {shown}") from None
        return values

    def value(self, values: dict[str, Any], key: str) -> Any:
        """The typed value of `key` from `check`'s result, else its default (None without one)."""
        if key in values:
            return values[key]
        opt = self.find(key)
        assert opt is not None, f"BUG: option {key} is not declared for {self.connector}"
        return None if opt.default is None else opt.parse(opt.default)

    def __add__(self, other: Options) -> Options:
        return Options(self.connector, *self.opts.values(), *other.opts.values())
