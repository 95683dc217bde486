"""Local-filesystem backend: a landing zone or checkpoint in a directory."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from typing_extensions import override

from connector.storage.base import TEMP_PREFIX, FileInfo, Storage

_LOG = logging.getLogger(__name__)


class LocalStorage(Storage):
    """A directory on a POSIX filesystem.

    ``rename_new`` uses ``link`` + ``unlink``: ``link`` fails atomically when the destination exists,
    which gives the no-overwrite rename that ``os.rename`` lacks.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def _abs(self, path: str) -> Path:
        full = (self.root / path).resolve() if path else self.root
        if full != self.root and self.root not in full.parents:
            msg = f"path {path!r} escapes the storage root {self.root}"
            raise ValueError(msg)
        return full

    @override
    def read_bytes(self, path: str) -> bytes:
        return self._abs(path).read_bytes()

    @override
    def create(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Write aside, fsync, then link into place: readers never see a partial file.
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, target)
        finally:
            os.unlink(tmp)
        _fsync_dir(target.parent)

    @override
    def replace(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    @override
    def rename_new(self, source: str, destination: str) -> None:
        src = self._abs(source)
        dst = self._abs(destination)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dst)
        os.unlink(src)
        _fsync_dir(dst.parent)

    @override
    def size(self, path: str) -> int | None:
        try:
            st = self._abs(path).stat()
        except FileNotFoundError:
            return None
        return st.st_size

    @override
    def list_dir(self, path: str) -> list[FileInfo]:
        folder = self._abs(path)
        if not folder.is_dir():
            return []
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        out = []
        with os.scandir(folder) as entries:
            for entry in entries:
                is_dir = entry.is_dir()
                out.append(FileInfo(prefix + entry.name, 0 if is_dir else entry.stat().st_size, is_dir))
        return sorted(out, key=lambda info: info.path)

    @override
    def delete(self, path: str) -> None:
        self._abs(path).unlink(missing_ok=True)

    @override
    def delete_tree(self, path: str) -> None:
        shutil.rmtree(self._abs(path), ignore_errors=True)

    @override
    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        # ``create`` and ``replace`` write ``_tmp_*.part`` beside their target; a crash between the
        # write and the link / rename leaves it there.
        folder = self._abs(prefix)
        cutoff = None if older_than is None else time.time() - older_than.total_seconds()
        deleted: list[str] = []
        for parent, _, names in os.walk(folder):
            for name in names:
                if not name.startswith(TEMP_PREFIX):
                    continue
                path = Path(parent) / name
                try:
                    if cutoff is not None and path.stat().st_mtime > cutoff:
                        continue
                    path.unlink()
                except FileNotFoundError:
                    continue
                deleted.append(path.relative_to(self.root).as_posix())
        if deleted:
            _LOG.info("deleted %d stale temporary file(s) under %s/%s", len(deleted), self.url, prefix)
        return sorted(deleted)


def _fsync_dir(folder: Path) -> None:
    """Make a rename or link durable across a power loss, not only a process crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
