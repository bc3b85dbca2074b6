"""Settings and durable counters: the `settings` table's keys (`SET name = value`,
`counter.<name>`, `retained_from.<relation>`)."""

from __future__ import annotations

from sparkwave.core.catalog.connection import CatalogBase


class SettingsMixin(CatalogBase):
    def setting(self, key: str, default: str | None = None) -> str | None:
        row = self._one("SELECT value FROM settings WHERE key = ?", (key,))
        return row[0] if row else default

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))

    def next_counter(self, name: str, n: int, start: int = 0) -> int:
        """Reserve `n` consecutive values of a durable counter (which begins at `start`); returns the
        first."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (f"counter.{name}",)).fetchone()
            first = int(row[0]) if row else start
            db.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (f"counter.{name}", str(first + n)))
        return first
