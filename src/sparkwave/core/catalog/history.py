"""History pruning: what the catalog forgets so that it stays the same size on a long run (old
committed epochs and applied requests) or after a DROP that crashed midway (orphaned rows)."""

from __future__ import annotations

from sparkwave.core.catalog.connection import CatalogBase
from sparkwave.core.catalog.relations import RELATION_TABLES
from sparkwave.core.catalog.watermarks import prune_watermarks

KEPT_EPOCHS = 1000  # committed epochs kept in `epochs` beyond what retention and pins need
KEPT_REQUESTS = 1000  # applied requests kept for `request_outcome`


class HistoryMixin(CatalogBase):
    def prune_history(self) -> int:
        """Forget committed epochs no reader can ask for (below every relation's oldest retained
        epoch and every pin, beyond the newest `KEPT_EPOCHS`) and old applied requests. Returns the
        epochs forgotten."""
        with self.transaction() as db:
            floor = db.execute(
                "SELECT min(e) FROM (SELECT coalesce(CAST(s.value AS INTEGER), r.created_epoch) AS e FROM relations r "
                "LEFT JOIN settings s ON s.key = 'retained_from.' || r.name "
                "WHERE r.kind != 'source' AND r.state != 'failed' "  # a source keeps none; a failed MV reads none
                "UNION ALL SELECT epoch FROM pins "
                "UNION ALL SELECT consumed_epoch FROM jobs WHERE phase != 'created' AND consumed_epoch IS NOT NULL)"
            ).fetchone()[0]
            newest = db.execute("SELECT epoch FROM epochs WHERE state = 'committed' ORDER BY epoch DESC "
                                "LIMIT 1 OFFSET ?", (KEPT_EPOCHS,)).fetchone()
            cut = None if newest is None else newest[0] if floor is None else min(floor, newest[0])
            gone = db.execute("DELETE FROM epochs WHERE state = 'committed' AND epoch < ?",
                              (cut,)).rowcount if cut is not None else 0
            if cut is not None:
                prune_watermarks(db, cut)  # each split's last value before the cut stays
            db.execute("DELETE FROM requests WHERE applied_at IS NOT NULL AND id <= "
                       "(SELECT max(id) FROM requests) - ?", (KEPT_REQUESTS,))
        return gone

    def forget_orphans(self) -> None:
        """Files, offsets and pins of relations that no longer exist (a DROP that crashed midway)."""
        with self.transaction() as db:
            for table in RELATION_TABLES:
                db.execute(f"DELETE FROM {table} WHERE relation NOT IN (SELECT name FROM relations)")
