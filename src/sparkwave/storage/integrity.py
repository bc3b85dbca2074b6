"""Damage to a stored file is an error naming it, never rows served wrong or short.

Every Parquet file sparkwave writes carries a CRC32 of each page (pyarrow's writers here pass
`write_page_checksum`; parquet-mr, Spark's writer, writes them by default and `core/spark.py` says
so explicitly), and every read verifies them: pyarrow's through the readers below, Spark's by
`parquet.page.verify-checksum.enabled` (its vectorized reader too). A page's damage fails the read
even where its values still decode (a plain int64 changed in place, a snappy literal). The footer has
no checksum: a damaged or truncated one fails to parse, and `check_rows` compares its row counts
with what the catalog recorded when the files were committed. A file written without page checksums
(by an older sparkwave) is read unverified. Key indexes carry a checksum of their own
(`key_index.py`)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sparkwave.core.catalog import Base, Catalog
from sparkwave.core.errors import CorruptFileError
from sparkwave.storage.file_index import file_index
from sparkwave.storage.filesystem import LOCAL

# A file gone (retention removed it: its readers list the files again) and the machine's errors
_NOT_DAMAGE = (FileNotFoundError, PermissionError, TimeoutError, ConnectionError, InterruptedError, pa.ArrowMemoryError)

PARQUET = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))


def write_table(table: pa.Table, where: str | Path, **options: Any) -> None:
    """`pq.write_table` with a CRC32 in every page header, whole or absent (`FileSystem.write_atomic`)."""
    LOCAL.write_atomic(where, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True, **options))


def parquet_file(path: str | Path, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """A Parquet file whose reads verify each page's CRC32. Reading it may raise: do it in `reading`."""
    return pq.ParquetFile(path, metadata=metadata, page_checksum_verification=True)


def read_table(path: str | Path, **options: Any) -> pa.Table:
    with reading(path):
        return pq.read_table(path, page_checksum_verification=True, **options)


def scan(files: list[str], schema: pa.Schema, expr: pa.compute.Expression | None) -> pa.Table:
    """The rows of `files` that `expr` holds for, as `schema`, checksums verified. The dataset's own
    error does not say which file failed: each is read again alone to name it."""
    try:
        return ds.dataset(files, schema=schema, format=PARQUET).to_table(filter=expr)
    except _NOT_DAMAGE:
        raise
    except (OSError, pa.ArrowException) as e:
        for f in files:
            with reading(f):
                parquet_file(f).read()
        raise damaged(files, _first_line(e)) from e


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Reads of `path` inside: an error of the file's bytes (a checksum, a footer, a page that does
    not decode) becomes a `CorruptFileError` naming it; a missing file and the machine's errors stay
    as they are."""
    try:
        yield
    except _NOT_DAMAGE:
        raise
    except (OSError, pa.ArrowException) as e:
        raise damaged(str(path), _first_line(e)) from e


def damaged(paths: str | list[str], why: str) -> CorruptFileError:
    """The error for `paths` (one file, or files of which one is), naming them and their relation."""
    paths = [paths] if isinstance(paths, str) else paths
    rel = relation_of(paths[0])
    what = f"file {paths[0]}" if len(paths) == 1 else f"one of the files {', '.join(paths)}"
    return CorruptFileError(f"{what}{f' of {rel!r}' if rel else ''} is damaged: {why}")


def relation_of(path: str | Path) -> str | None:
    """The relation whose file `path` is (`tables/<name>/{base,log,index}/<file>`, a state table's
    `tables/<mv>/state/<suffix>/...`), by the warehouse's layout (`warehouse.relation_dir`)."""
    parts = Path(path).parts
    if len(parts) < 4 or parts[-2] not in ("base", "log", "index"):
        return None
    if len(parts) >= 6 and parts[-4] == "state" and parts[-6] == "tables":
        return f"{parts[-5]}.{parts[-3]}"
    return parts[-3] if parts[-4] == "tables" else None


def footer_rows(path: str) -> int:
    """The row count in a file's footer, read once per file (by path, size and time): every lookup
    of every epoch checks the counts of the log files it overlays, more files than `file_index` keeps."""
    st = os.stat(path)
    return _footer_rows(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1 << 16)
def _footer_rows(path: str, size: int, mtime: int) -> int:
    with reading(path):
        return int(file_index(path).metadata.num_rows)


def check_rows(catalog: Catalog, name: str, base: Base | None, logs: Sequence[tuple[int, str]]) -> None:
    """Raise a `CorruptFileError` if the footers of `base`'s files, or of a log file `(epoch,
    path)`, count other rows than the catalog recorded when they were committed. Footers are
    parsed once per file (`file_index`). A file removed meanwhile is left to the read, which fails
    or lists the files again."""
    try:
        if base is not None and base.files:
            found = sum(footer_rows(f) for f in base.files)
            if found != base.rows:
                raise damaged(base.files, f"the base files of {name!r} hold {found} rows, the catalog recorded "
                                          f"{base.rows}")
        if logs:
            recorded = dict(catalog.log_file_rows(name, logs[0][0] - 1, logs[-1][0]))
            for e, f in logs:
                found = footer_rows(f)
                if e in recorded and found != recorded[e]:
                    raise damaged(f, f"the log file of epoch {e} holds {found} rows, the catalog recorded "
                                     f"{recorded[e]}")
    except FileNotFoundError:
        return


_READ_FILE = re.compile(r"Encountered error while reading file (\S+?)\.?\s+(?:SQLSTATE|$)", re.MULTILINE)
_CAUSE = re.compile(r"^Caused by: ([\w.$]+)(?::\s*(.*))?$", re.MULTILINE)


def spark_read_error(err: BaseException) -> str | None:
    """What a Spark job's failure to read a file says, in a line: the file, its relation and the
    deepest cause (a page's CRC, a footer that does not parse), rather than Py4J's first line
    ("An error occurred while calling o123.collectToPython"); None if `err` is no such failure."""
    text = str(err)
    m = _READ_FILE.search(text)
    if m is None:
        return None
    url = urlparse(m.group(1))
    path = unquote(url.path) if url.scheme in ("file", "") else m.group(1)
    causes = [msg or cls for cls, msg in _CAUSE.findall(text)]
    rel = relation_of(path)
    why = causes[-1] if causes else "the read failed"
    return f"cannot read file {path}{f' of {rel!r}' if rel else ''}: {why}"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
