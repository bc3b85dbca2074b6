"""The session statements PostgreSQL clients send besides their queries: SET/RESET/SHOW of the
protocol's parameters (client_encoding, DateStyle, TimeZone, application_name, ...), transaction
control (BEGIN ... COMMIT/ROLLBACK, SAVEPOINT), DISCARD, DEALLOCATE, UNLISTEN, CLOSE.

sparkwave commits every statement on its own (as RisingWave does): BEGIN opens no transaction, it
only makes the connection report one (ReadyForQuery 'T'), and a ROLLBACK after writes says that
those writes were committed. A SET or SHOW of one of sparkwave's own settings (`meta/settings.py`
SPECS, statement_timeout) is not a session statement: the caller passes their names and runs them."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sparkwave.server.backend import Field, Outcome, ServerError

SERVER_VERSION = "13.14.0"  # what RisingWave reports: clients pick their catalog queries by it
SERVER_VERSION_NUM = "130014"


def version_string() -> str:
    """`SELECT version()`: PostgreSQL's form, which SQLAlchemy and others parse for the number."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("sparkwave")
    except PackageNotFoundError:
        ours = "dev"
    return f"PostgreSQL {SERVER_VERSION}-sparkwave-{ours} on x86_64-pc-linux-gnu, compiled by sparkwave, 64-bit"


# canonical name -> (default, reported in ParameterStatus, read-only)
_PARAMETERS: dict[str, tuple[str, bool, bool]] = {
    "server_version": (SERVER_VERSION, True, True),
    "server_version_num": (SERVER_VERSION_NUM, False, True),
    "server_encoding": ("UTF8", True, True),
    "client_encoding": ("UTF8", True, False),
    "DateStyle": ("ISO, MDY", True, False),
    "IntervalStyle": ("postgres", True, False),
    "TimeZone": ("UTC", True, False),
    "integer_datetimes": ("on", True, True),
    "standard_conforming_strings": ("on", True, False),
    "is_superuser": ("on", True, True),
    "session_authorization": ("", True, True),
    "application_name": ("", True, False),
    "default_transaction_read_only": ("off", True, False),
    "in_hot_standby": ("off", True, True),
    "search_path": ('"$user", public', False, False),
    "extra_float_digits": ("1", False, False),
    "transaction_isolation": ("read committed", False, False),
    "default_transaction_isolation": ("read committed", False, False),
    "transaction_read_only": ("off", False, False),
    "client_min_messages": ("notice", False, False),
    "lock_timeout": ("0", False, False),
    "idle_in_transaction_session_timeout": ("0", False, False),
    "idle_session_timeout": ("0", False, False),
    "max_identifier_length": ("63", False, True),
    "max_index_keys": ("32", False, True),
    "block_size": ("8192", False, True),
    "bytea_output": ("hex", False, False),
    "jit": ("off", False, False),
    "row_security": ("on", False, False),
    "synchronize_seqscans": ("on", False, False),
    "lc_collate": ("C.UTF-8", False, True),
    "lc_ctype": ("C.UTF-8", False, True),
    "lc_messages": ("C", False, False),
    "lc_monetary": ("C", False, False),
    "lc_numeric": ("C", False, False),
    "lc_time": ("C", False, False),
    "default_text_search_config": ("pg_catalog.english", False, False),
    "timezone_abbreviations": ("Default", False, False),
    "default_table_access_method": ("heap", False, False),
    "max_connections": ("100", False, True),
    "geqo": ("on", False, False),
    "enable_seqscan": ("on", False, False),
    "work_mem": ("4MB", False, False),
    "escape_string_warning": ("on", False, False),
    "scram_iterations": ("4096", True, True),
}
_CANONICAL = {name.lower(): name for name in _PARAMETERS}
MAX_CUSTOM_PARAMETERS = 1000  # `SET myapp.x = …` in a loop must not grow a session without bound
_ISOLATIONS = ("read committed", "repeatable read", "serializable", "read uncommitted")
_UTF8 = ("utf8", "utf-8", "unicode", "sql_ascii")


def canonical(name: str) -> str | None:
    """The parameter's canonical spelling ('timezone' -> 'TimeZone'), or None for an unknown one."""
    key = name.strip().strip('"').lower()
    if key == "time zone":
        key = "timezone"
    return _CANONICAL.get(key)


class SessionSettings:
    """One connection's protocol parameters and transaction state (kept by the serve helper's Client)."""

    def __init__(self, user: str = "root", database: str = "dev", startup: dict[str, str] | None = None) -> None:
        self.user, self.database = user, database
        self.defaults = {name: default for name, (default, _, _) in _PARAMETERS.items()}
        self.defaults["session_authorization"] = user
        for name, value in (startup or {}).items():  # startup options become the session's defaults
            if name in ("user", "database", "options", "replication"):
                continue
            if (key := canonical(name)) is not None and not _PARAMETERS[key][2]:
                self.defaults[key] = validate(key, value)
            elif "." in name:
                self.defaults[name.lower()] = value
        self.params: dict[str, str] = dict(self.defaults)
        self.in_transaction = False
        self.wrote_in_transaction = False

    def get(self, name: str) -> str | None:
        key = canonical(name) or name.lower()
        return self.params.get(key)

    def lowercase(self) -> dict[str, str]:
        """Every parameter by its lower-case name (for current_setting and pg_settings)."""
        return {k.lower(): v for k, v in self.params.items()}

    def parameter_status(self) -> dict[str, str]:
        """The ParameterStatus messages to send after authentication."""
        return {name: self.params[name] for name, (_, reported, _) in _PARAMETERS.items() if reported}

    def mark_write(self) -> None:
        """The serve helper calls this when a write (DML, DDL) ran inside BEGIN ... (for ROLLBACK's notice)."""
        if self.in_transaction:
            self.wrote_in_transaction = True

    def set(self, name: str, value: str | None) -> dict[str, str]:
        """SET name = value (None: DEFAULT); returns the reported parameters that changed."""
        key = canonical(name)
        if key is None:
            if "." not in name:
                raise ServerError("42704", f'unrecognized configuration parameter "{name}"')
            key = name.lower()  # a custom (placeholder) parameter, as PostgreSQL allows: myapp.x
            if key not in self.params and len(self.params) >= len(_PARAMETERS) + MAX_CUSTOM_PARAMETERS:
                raise ServerError("54000", f'too many custom parameters: a session holds at most '
                                           f'{MAX_CUSTOM_PARAMETERS:,} (setting "{name}")')
        elif _PARAMETERS[key][2]:
            raise ServerError("55P02", f'parameter "{key}" cannot be changed')
        before = self.params.get(key)
        self.params[key] = self.defaults.get(key, "") if value is None else validate(key, value)
        reported = key in _PARAMETERS and _PARAMETERS[key][1]
        return {key: self.params[key]} if reported and before != self.params[key] else {}

    def reset_all(self) -> dict[str, str]:
        changed = {k: v for k, v in self.defaults.items()
                   if self.params.get(k) != v and k in _PARAMETERS and _PARAMETERS[k][1]}
        self.params = dict(self.defaults)
        return changed


def validate(key: str, value: str) -> str:
    """The value a parameter is stored as, or a 22023 error saying what it accepts."""
    text = value.strip()
    low = text.lower()
    if key == "client_encoding":
        if low.replace("'", "") not in _UTF8:
            raise ServerError("22023", f"client_encoding {text!r} is not supported: sparkwave speaks UTF8 only")
        return "UTF8" if low != "sql_ascii" else "SQL_ASCII"
    if key == "DateStyle":
        parts = [p.strip().upper() for p in text.split(",") if p.strip()]
        order = next((p for p in parts if p in ("MDY", "DMY", "YMD", "US", "EUROPEAN", "NONEURO")), "MDY")
        if any(p not in ("ISO", "MDY", "DMY", "YMD", "US", "EUROPEAN", "NONEURO") for p in parts):
            raise ServerError("22023", f"DateStyle {text!r} is not supported: sparkwave writes dates as ISO only")
        order = {"US": "MDY", "NONEURO": "MDY", "EUROPEAN": "DMY"}.get(order, order)
        return f"ISO, {order}"
    if key == "TimeZone":
        return _timezone(text)
    if key == "standard_conforming_strings" and low not in ("on", "true", "1", "yes"):
        raise ServerError("0A000", "standard_conforming_strings cannot be turned off in sparkwave")
    if key == "IntervalStyle" and low != "postgres":
        raise ServerError("22023", f"IntervalStyle {text!r} is not supported: only postgres")
    if key == "extra_float_digits":
        if not re.fullmatch(r"-?\d+", text) or not -15 <= int(text) <= 3:
            raise ServerError("22023", f"extra_float_digits must be an integer from -15 to 3, got {text!r}")
    if key in ("transaction_isolation", "default_transaction_isolation"):
        if " ".join(low.split()) not in _ISOLATIONS:
            raise ServerError("22023", f"invalid transaction isolation level {text!r}")
        return " ".join(low.split())
    if key == "application_name":
        return text[:63]
    return text


def _timezone(text: str) -> str:
    if text.upper() in ("UTC", "GMT", "Z", "LOCAL", "DEFAULT"):
        return "UTC" if text.upper() != "GMT" else "GMT"
    if re.fullmatch(r"[+-]?\d{1,2}(:\d\d)?", text):
        return text
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ServerError("22023", f'invalid value for parameter "TimeZone": "{text}"') from None
    return text


@dataclass
class SessionResult:
    """A session statement's result, for the serve helper to turn into an Outcome (`outcome()`)."""

    tag: str
    columns: list[str] | None = None
    rows: list[tuple[str | None, ...]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    changed: dict[str, str] = field(default_factory=dict)  # ParameterStatus to send
    deallocate: str | None = None  # DEALLOCATE name / '*' for ALL and DISCARD ALL: prepared statements to drop

    def outcome(self) -> Outcome:
        from pyspark.sql.types import StringType

        if self.columns is None:
            return Outcome(self.tag, notices=list(self.notices))
        fields = [Field(c, StringType()) for c in self.columns]
        return Outcome(self.tag, fields, iter([self.rows]), list(self.notices))


_WORDS = re.compile(r"\s+")
_TXN_START = re.compile(r"^(begin|start\s+transaction)\b", re.I)
_TXN_END = re.compile(r"^(commit|end|rollback|abort)(\s+(work|transaction))?(\s+and\s+(no\s+)?chain)?$", re.I)
_SET = re.compile(r"^set\s+(?:(session|local)\s+)?(.+)$", re.I | re.S)
_SHOW = re.compile(r"^show\s+(.+)$", re.I | re.S)
_RESET = re.compile(r"^reset\s+(.+)$", re.I | re.S)
_ASSIGN = re.compile(r"^(\"[^\"]+\"|[A-Za-z_][\w.]*)\s*(?:=|\s+to\s+|\s)\s*(.*)$", re.I | re.S)
_OTHER = re.compile(r"^(savepoint|release|rollback\s+to|discard|deallocate|unlisten|close)\b", re.I)


def _clean(sql: str) -> str:
    text = re.sub(r"--[^\n]*", " ", sql)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return _WORDS.sub(" ", text).strip().rstrip(";").strip()


def _name_of(text: str) -> str:
    m = re.match(r"^(\"[^\"]+\"|[A-Za-z_][\w.]*)", text.strip())
    return m.group(1).strip('"') if m else text.strip()


def is_session_statement(sql: str, sparkwave_settings: Collection[str] = ()) -> bool:
    """Whether `sql` (one statement) is for `run_session_statement`: transaction control, DISCARD,
    DEALLOCATE, and SET/SHOW/RESET of a PostgreSQL session parameter. SET/SHOW/RESET of a name in
    `sparkwave_settings` (meta.settings.SPECS) or of a name nobody knows is not: sparkwave runs those
    (and its error lists its settings)."""
    text = _clean(sql)
    if _TXN_START.match(text) or _TXN_END.match(text) or _OTHER.match(text):
        return True
    for pattern in (_SET, _SHOW, _RESET):
        if m := pattern.match(text):
            rest = " ".join((_set_rest(m) if pattern is _SET else m.group(1)).lower().split())
            name = _name_of(rest).lower()
            if name in {s.lower() for s in sparkwave_settings}:
                return False
            return rest.startswith(_SESSION_FORMS) or canonical(name) is not None or "." in name
    return False


# SET/SHOW/RESET forms that are not `name = value`
_SESSION_FORMS = ("all", "time zone", "names ", "schema ", "session characteristics ", "transaction ",
                  "session authorization", "role ")


def run_session_statement(sql: str, settings: SessionSettings) -> SessionResult:
    """Run one session statement against the connection's settings."""
    text = _clean(sql)
    if m := _TXN_START.match(text):
        return _begin(text, settings, "BEGIN" if m.group(1).lower() == "begin" else "START TRANSACTION")
    if m := _TXN_END.match(text):
        return _end(m.group(1).lower(), settings)
    if m := _SET.match(text):
        return _set(_set_rest(m), settings)
    if m := _SHOW.match(text):
        return _show(m.group(1), settings)
    if m := _RESET.match(text):
        name = m.group(1).strip()
        changed = settings.reset_all() if name.lower() == "all" else settings.set(_reset_name(name), None)
        return SessionResult("RESET", changed=changed)
    return _other(text, settings)


def _reset_name(name: str) -> str:
    return "TimeZone" if name.lower() == "time zone" else "transaction_isolation" if name.lower().startswith(
        "transaction isolation") else _name_of(name)


def _begin(text: str, settings: SessionSettings, tag: str) -> SessionResult:
    notices = []
    if settings.in_transaction:
        notices.append("there is already a transaction in progress")
    else:
        settings.in_transaction, settings.wrote_in_transaction = True, False
    return SessionResult(tag, notices=notices)


def _end(word: str, settings: SessionSettings) -> SessionResult:
    rollback = word in ("rollback", "abort")
    notices = []
    if not settings.in_transaction:
        notices.append("there is no transaction in progress")
    elif rollback and settings.wrote_in_transaction:
        notices.append("sparkwave commits every statement on its own: the writes since BEGIN were committed and "
                       "are not rolled back")
    settings.in_transaction = settings.wrote_in_transaction = False
    settings.params["transaction_isolation"] = settings.defaults["transaction_isolation"]
    return SessionResult("ROLLBACK" if rollback else "COMMIT", notices=notices)


def _set_rest(m: re.Match) -> str:
    """What follows SET [SESSION | LOCAL] (LOCAL is as SESSION: there are no transactions), keeping
    SESSION where it is part of the statement (SET SESSION CHARACTERISTICS / AUTHORIZATION)."""
    scope, rest = m.group(1), m.group(2)
    if scope and scope.lower() == "session" and rest.lower().startswith(("characteristics ", "authorization ")):
        return f"session {rest}"
    return rest


def _set(rest: str, settings: SessionSettings) -> SessionResult:
    low = rest.lower()
    if low.startswith("time zone "):
        return SessionResult("SET", changed=settings.set("TimeZone", _value(rest[len("time zone "):])))
    if low.startswith("names "):
        return SessionResult("SET", changed=settings.set("client_encoding", _value(rest[len("names "):]) or "UTF8"))
    if low.startswith("schema "):
        return SessionResult("SET", changed=settings.set("search_path", _value(rest[len("schema "):])))
    if low.startswith(("session characteristics as transaction ", "transaction ")):
        m = re.search(r"isolation level (read committed|repeatable read|serializable|read uncommitted)", low)
        if m:
            key = "transaction_isolation" if low.startswith("transaction ") else "default_transaction_isolation"
            settings.set(key, m.group(1))
        return SessionResult("SET")
    if low.startswith(("session authorization ", "role ")):
        who = _value(rest.split(" ", 2)[-1] if low.startswith("session ") else rest.split(" ", 1)[1])
        if who not in (None, "none", settings.user):
            raise ServerError("0A000", f"sparkwave has one user per connection; cannot become {who!r}")
        return SessionResult("SET")
    m = _ASSIGN.match(rest)
    if not m:
        raise ServerError("42601", f"syntax error in SET {rest!r}: expected SET name = value")
    return SessionResult("SET", changed=settings.set(m.group(1).strip('"'), _value(m.group(2))))


def _value(text: str) -> str | None:
    """A SET value: 'quoted', identifier, number, a list (a, 'b'), DEFAULT (None) or LOCAL (None)."""
    text = text.strip()
    if not text:
        raise ServerError("42601", "SET needs a value")
    if text.lower() in ("default", "local"):
        return None
    items = re.findall(r"'((?:[^']|'')*)'|\"((?:[^\"]|\"\")*)\"|([^,\s]+)", text)
    values = []
    for quoted, dquoted, bare in items:
        if quoted or (not dquoted and not bare):
            values.append(quoted.replace("''", "'"))
        elif dquoted:
            values.append('"' + dquoted + '"' if "$" in dquoted else dquoted)
        else:
            values.append(bare)
    return ", ".join(values)


def _show(rest: str, settings: SessionSettings) -> SessionResult:
    low = " ".join(rest.lower().split())
    if low == "all":
        ordered = sorted(settings.params.items(), key=lambda kv: kv[0].lower())
        rows: list[tuple[str | None, ...]] = [(name, value, "") for name, value in ordered]
        return SessionResult("SHOW", ["name", "setting", "description"], rows)
    if low == "time zone":
        low = "timezone"
    if low == "transaction isolation level":
        return SessionResult("SHOW", ["transaction_isolation"], [(settings.params["transaction_isolation"],)])
    name = _name_of(rest)
    key = canonical(name) or name.lower()
    if key not in settings.params:
        raise ServerError("42704", f'unrecognized configuration parameter "{name}"')
    return SessionResult("SHOW", [key if key in _PARAMETERS else name.lower()], [(settings.params[key],)])


def _other(text: str, settings: SessionSettings) -> SessionResult:
    low = text.lower()
    first = low.split(" ", 1)[0]
    if first == "savepoint":
        return SessionResult("SAVEPOINT", notices=[] if settings.in_transaction else [
            "SAVEPOINT outside a transaction block does nothing"])
    if first == "release":
        return SessionResult("RELEASE")
    if low.startswith("rollback to"):
        notices = (["sparkwave commits every statement on its own: the writes since the savepoint were committed"]
                   if settings.wrote_in_transaction else [])
        return SessionResult("ROLLBACK", notices=notices)
    if first == "discard":
        what = low.split(" ", 1)[1] if " " in low else ""
        if what == "all":
            if settings.in_transaction:
                raise ServerError("25001", "DISCARD ALL cannot run inside a transaction block")
            return SessionResult("DISCARD ALL", changed=settings.reset_all(), deallocate="*")
        if what in ("plans", "sequences", "temp", "temporary"):
            return SessionResult(f"DISCARD {what.upper().replace('TEMPORARY', 'TEMP')}")
        raise ServerError("42601", f"syntax error in DISCARD {what!r}: expected ALL, PLANS, SEQUENCES or TEMP")
    if first == "deallocate":
        name = re.sub(r"^deallocate\s+(prepare\s+)?", "", text, flags=re.I).strip()
        if name.lower() == "all":
            return SessionResult("DEALLOCATE ALL", deallocate="*")
        return SessionResult("DEALLOCATE", deallocate=name.strip('"'))
    if first == "unlisten":
        return SessionResult("UNLISTEN")
    if first == "close":
        return SessionResult("CLOSE CURSOR ALL" if low == "close all" else "CLOSE CURSOR")
    raise ServerError("0A000", f"unsupported session statement: {text[:60]!r}")


def session_rows(settings: SessionSettings) -> list[tuple[Any, ...]]:
    """pg_settings rows for the session's parameters."""
    return [(name, value, None, "Sessions", "", None, "user" if not _PARAMETERS.get(name, ("", 0, 0))[2]
             else "internal", "string", "default" if settings.defaults.get(name) == value else "session",
             None, None, None, settings.defaults.get(name), settings.defaults.get(name), None, None, 0)
            for name, value in sorted(settings.params.items())]
