"""Requests: ALTER / CANCEL of a job sent by another process, applied by the owner, which records
the outcome the sender waits for."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparkwave.core.catalog.connection import CatalogBase


@dataclass(frozen=True)
class Request:
    id: int
    job: int
    kind: str  # rate_limit | cancel
    value: int | None


class RequestsMixin(CatalogBase):
    def add_request(self, job_id: int, kind: str, value: int | None) -> int:
        with self.transaction() as db:
            return int(db.execute("INSERT INTO requests (job, kind, value, requested_at) VALUES (?, ?, ?, ?)",
                                  (job_id, kind, value, time.time())).lastrowid or 0)

    def pending_requests(self) -> list[Request]:
        return [Request(*r) for r in self._all("SELECT id, job, kind, value FROM requests WHERE applied_at IS NULL "
                                               "ORDER BY id")]

    def request_outcome(self, request_id: int) -> str | None:
        row = self._one("SELECT outcome FROM requests WHERE id = ? AND applied_at IS NOT NULL", (request_id,))
        return row[0] if row else None

    def finish_request(self, request_id: int, outcome: str) -> None:
        with self.transaction() as db:
            db.execute("UPDATE requests SET applied_at = ?, outcome = ? WHERE id = ?",
                       (time.time(), outcome, request_id))
