"""The Delta Lake sink (delta-rs): an external Delta table kept equal to the MV (upsert, by MERGE
on the key) or receiving its inserts (append-only).

Exactly once: each delivery is one Delta commit carrying the sink's position as two app
transactions (`<sink_id>/epoch`, `<sink_id>/vnode`); `progress()` reads them back, so a delivery
that Delta already holds is skipped. The table is created at CREATE SINK if `location` holds none."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc

from sparkwave.connectors.options import Options, boolean, text
from sparkwave.connectors.sink import APPEND_ONLY, Position, SinkSpec, SinkTarget, deletes_and_upserts

REMOTE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "adl")
# delta-rs's object-store settings that name no file, command or metadata endpoint of the host
OPTIONS = Options(
    "deltalake",
    text("location"),
    *[text(f"storage.{k}") for k in ("aws_access_key_id", "aws_region", "aws_endpoint", "aws_endpoint_url",
                                     "aws_conditional_put", "azure_storage_account_name", "azure_client_id",
                                     "azure_tenant_id", "timeout", "connect_timeout")],
    *[text(f"storage.{k}", secret=True) for k in ("aws_secret_access_key", "aws_session_token",
                                                  "azure_storage_account_key", "azure_storage_sas_token",
                                                  "azure_client_secret")],
    text("storage.google_service_account_key", secret=True, long=True),
    *[boolean(f"storage.{k}") for k in ("allow_http", "aws_allow_http", "aws_s3_allow_unsafe_rename",
                                        "aws_virtual_hosted_style_request", "azure_storage_use_emulator")],
)


def local_path(location: str) -> Path | None:
    """The folder a Delta `location` names on this host, normalised (absolute, `..` and symlinks
    resolved), or None for a remote URL. ValueError saying why if it is refused: control characters,
    leading or trailing whitespace, a scheme delta-rs does not write to, and any `%` in a local path
    (delta-rs decodes percent escapes, so the folder it writes could differ from the one checked)."""
    if re.search(r"[\x00-\x1f\x7f]", location):
        raise ValueError("holds a control character")
    if location != location.strip():
        raise ValueError("has leading or trailing whitespace")
    parsed = urlparse(location)
    if parsed.scheme in REMOTE_SCHEMES:
        return None
    if len(parsed.scheme) > 1 and parsed.scheme != "file":
        raise ValueError(f"has scheme {parsed.scheme!r}; supported: a local path, file://, "
                         + ", ".join(f"{s}://" for s in REMOTE_SCHEMES))
    path = location
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment or parsed.params:
            raise ValueError("is a file: URL with a host, query or fragment")
        path = unquote(parsed.path)
    if "%" in path:
        raise ValueError("holds '%' (percent escapes are not taken in a local path)")
    return Path(path).resolve()


class DeltaSink(SinkTarget):
    exactly_once = True

    def __init__(self, spec: SinkSpec) -> None:
        super().__init__(spec)
        spec.check_options(OPTIONS)
        self.location = spec.required("location", "the Delta table's path or URI")
        self.storage = {k[len("storage."):]: v for k, v in spec.options.items() if k.startswith("storage.")}
        self.arrow = pa.schema([pa.field(c.name, c.type.arrow) for c in spec.columns])

    def _apps(self) -> tuple[str, str]:
        return f"sparkwave-sink/{self.spec.sink_id}/epoch", f"sparkwave-sink/{self.spec.sink_id}/vnode"

    def _table(self) -> Any:
        from deltalake import DeltaTable
        return DeltaTable(self.location, storage_options=self.storage or None)

    def check(self) -> None:
        from deltalake import DeltaTable
        try:
            if not DeltaTable.is_deltatable(self.location, storage_options=self.storage or None):
                DeltaTable.create(self.location, self.arrow, storage_options=self.storage or None)
                return
            have = pa.schema(self._table().schema().to_arrow())
        except Exception as e:
            raise self.spec.error(f"cannot use the Delta table at {self.location}: "
                                  f"{' '.join(str(e).split())[:300]}") from None
        for f in self.arrow:
            idx = have.get_field_index(f.name)
            if idx < 0:
                raise self.spec.error(f"column {f.name!r} ({f.type}) is missing from the Delta table at "
                                      f"{self.location}")
            theirs = have.field(idx).type
            if not (theirs == f.type or (pa.types.is_string(f.type) and pa.types.is_large_string(theirs))
                    or (pa.types.is_string(f.type) and pa.types.is_string_view(theirs))
                    or (pa.types.is_binary(f.type) and (pa.types.is_large_binary(theirs)
                                                        or pa.types.is_binary_view(theirs)))):
                raise self.spec.error(f"column {f.name!r} is {f.type} in the sink but {theirs} in the Delta "
                                      f"table at {self.location}")

    def progress(self) -> Position | None:
        dt = self._table()
        app_epoch, app_vnode = self._apps()
        epoch, vnode = dt.transaction_version(app_epoch), dt.transaction_version(app_vnode)
        return None if epoch is None or vnode is None else Position(int(epoch), int(vnode))

    def write(self, change: pa.Table, to: Position) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake
        app_epoch, app_vnode = self._apps()
        commit = CommitProperties(app_transactions=[Transaction(app_epoch, to.epoch), Transaction(app_vnode, to.vnode)])
        names = [c.name for c in self.spec.columns]
        gone, new = deletes_and_upserts(change, self.spec.mode, self.spec.key)
        dt = self._table()
        if self.spec.mode == APPEND_ONLY or not self.spec.key:
            write_deltalake(dt, new.select(names).cast(self.arrow), mode="append", commit_properties=commit)
            return
        # MERGE wants one source row per key: a key's new row, or its removal if it has none.
        key = list(self.spec.key)
        gone = gone.filter(pc.invert(_member(gone, new, key)))
        source = pa.concat_tables([gone.select(["_op", *names]), new.select(["_op", *names])]).cast(
            pa.schema([pa.field("_op", pa.int8()), *self.arrow]))
        match = " AND ".join(f"t.`{k}` IS NOT DISTINCT FROM s.`{k}`" for k in key)  # a key may hold NULL
        values = {n: f"s.`{n}`" for n in names}
        (dt.merge(source, predicate=match, source_alias="s", target_alias="t", commit_properties=commit)
         .when_matched_delete(predicate="s._op IN (2, 3)")
         .when_matched_update(updates=values, predicate="s._op IN (1, 4)")
         .when_not_matched_insert(updates=values, predicate="s._op IN (1, 4)")
         .execute())


def _member(rows: pa.Table, of: pa.Table, key: list[str]) -> pa.Array:
    """Whether each row's key is among `of`'s keys (NULL equal to NULL, as in the MERGE)."""
    keys = set(zip(*[of[k].to_pylist() for k in key], strict=True))
    return pa.array([k in keys for k in zip(*[rows[k].to_pylist() for k in key], strict=True)], pa.bool_())
