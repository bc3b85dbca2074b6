"""The warehouse's files through one interface: what sparkwave itself does to them (list, test,
delete, move, write atomically, open), so that recovery's sweep, retention and the integrity
layer's writes do not assume a POSIX folder. `LocalFileSystem` is the one implementation today.

An object store is the next one (on paper, ARCHITECTURE.md "Beyond one disk"): list is a prefix
listing, delete a batch delete, `write_atomic` a single PUT (whole or absent, last writer wins),
`rename` a copy and delete (only recovery's lost+found moves rename). delta-rs writes S3, ADLS and
GCS natively; Spark needs its connector jars (hadoop-aws and the like) on the cluster."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

PathLike = str | os.PathLike[str]


class FileSystem(Protocol):
    def list(self, folder: PathLike) -> list[str]:
        """The names in `folder`, sorted; none if it is missing."""
        ...

    def exists(self, path: PathLike) -> bool: ...

    def is_dir(self, path: PathLike) -> bool: ...

    def is_link(self, path: PathLike) -> bool: ...

    def make_dirs(self, folder: PathLike) -> None: ...

    def delete(self, path: PathLike) -> None:
        """Delete a file or a folder and everything in it; a missing one is fine."""
        ...

    def rename(self, source: PathLike, dest: PathLike) -> None:
        """Move `source` to `dest`, replacing a file there."""
        ...

    def write_atomic(self, path: PathLike, write: Callable[[str], Any]) -> None:
        """`write(name)` writes the file under a temporary name; `path` then holds all of it or,
        after a crash, its previous content: a reader (or a second writer of the same rows, an
        owner fenced out mid-epoch) never meets a partial file."""
        ...

    def open(self, path: PathLike, mode: str = "rb") -> IO[Any]: ...


class LocalFileSystem:
    """A folder every node mounts at the same path (local disk, NFS)."""

    def list(self, folder: PathLike) -> list[str]:
        try:
            return sorted(os.listdir(folder))
        except FileNotFoundError:
            return []

    def exists(self, path: PathLike) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: PathLike) -> bool:
        return os.path.isdir(path)

    def is_link(self, path: PathLike) -> bool:
        return os.path.islink(path)

    def make_dirs(self, folder: PathLike) -> None:
        os.makedirs(folder, exist_ok=True)

    def delete(self, path: PathLike) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def rename(self, source: PathLike, dest: PathLike) -> None:
        os.replace(source, dest)

    def write_atomic(self, path: PathLike, write: Callable[[str], Any]) -> None:
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")  # hidden: Spark's listings skip it
        try:
            write(str(tmp))
            os.replace(tmp, target)
        except BaseException:
            self.delete(tmp)
            raise

    def open(self, path: PathLike, mode: str = "rb") -> IO[Any]:
        return open(path, mode)


LOCAL = LocalFileSystem()
