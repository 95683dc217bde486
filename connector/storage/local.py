"""Local-filesystem backend: a landing zone or checkpoint in a directory."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from typing_extensions import override

from connector.errors import WriterFenced
from connector.storage.base import TEMP_PREFIX, FileInfo, Storage, WriterIdentity, WriterLease
from connector.storage.errors import StorageError

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
        with _naming_the_path(target, path, "create"):
            self._create(target, data)

    def _create(self, target: Path, data: bytes) -> None:
        # Linked into place: an existing name is never overwritten (FileExistsError).
        _write_aside_then(target, data, lambda tmp: os.link(tmp, target))

    @override
    def write_aside(self, path: str, data: bytes) -> None:
        # Straight to the staged name, with no ``_tmp_`` file aside: a task killed mid-write leaves that name,
        # which the batch's clean-up of failed attempts deletes; a ``_tmp_`` file would wait for the next start.
        target = self._abs(path)
        with _naming_the_path(target, path, "write_aside"):
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_durably(fd, data)
            except BaseException:
                target.unlink(missing_ok=True)  # the name is this write's own: a full disk leaves nothing
                raise

    @override
    def replace(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        with _naming_the_path(target, path, "replace"):
            self._replace(target, data)

    def _replace(self, target: Path, data: bytes) -> None:
        _write_aside_then(target, data, lambda tmp: os.replace(tmp, target))

    @override
    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        del size  # a local link either happened or raised: no answer to lose
        src = self._abs(source)
        dst = self._abs(destination)
        with _naming_the_path(dst, destination, "rename_new"):
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

    @override
    def acquire_lease(self, path: str, holder: WriterIdentity) -> LocalLease:
        """Hold ``flock(LOCK_EX | LOCK_NB)`` on ``path`` for as long as the lease (and so the process) lives.

        The kernel drops the lock when the process dies, however it dies, so a crash never leaves a
        stale lock behind; the holder record in the file is only there to name the holder.
        """
        target = self._abs(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # Opened without truncating: the holder's record must survive a refused opener.
            fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            msg = f"cannot open the writer lock {target}: {err.strerror or type(err).__name__}"
            raise StorageError(msg, path=path, operation="acquire_lease") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = _read_holder(fd)
            os.close(fd)
            who = current.describe() if current is not None else "an instance that has not recorded itself yet"
            reason = (
                f"another connector instance is writing here: {who}. Only one instance may use a checkpoint "
                "or a landing zone; stop that one first, or give this one its own checkpoint and landing zone"
            )
            raise WriterFenced(str(target), who, reason) from None
        except OSError as err:
            os.close(fd)
            msg = f"cannot lock the writer lock {target}: {err.strerror or type(err).__name__}"
            raise StorageError(msg, path=path, operation="acquire_lease") from None
        record = json.dumps(holder.as_fields(), sort_keys=True).encode() + b"\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        os.fsync(fd)
        _LOG.info("holding the writer lock %s as %s", target, holder.describe())
        return LocalLease(target, fd, holder)


class LocalLease(WriterLease):
    """An ``flock`` held on an open lock file; released by closing it (or by the process ending)."""

    def __init__(self, path: Path, fd: int, holder: WriterIdentity) -> None:
        self.location = str(path)
        self.holder = holder
        self._fd: int | None = fd

    @override
    def check(self) -> None:
        # The kernel keeps an flock for as long as the descriptor is open: nothing can take it away.
        if self._fd is None:
            reason = f"the writer lock was released by {self.holder.describe()}; this instance no longer writes here"
            raise WriterFenced(self.location, self.holder.describe(), reason)

    @override
    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # Forget the holder while still holding the lock, so a record is always the live holder's. The
            # file itself stays: deleting it would let a third instance lock a new file while a second one
            # still holds the old, unlinked one.
            os.ftruncate(fd, 0)
        except OSError as err:
            _LOG.warning("could not clear the writer lock %s: %s", self.location, err.strerror)
        finally:
            os.close(fd)


def _read_holder(fd: int) -> WriterIdentity | None:
    """The holder recorded in a lock file, or ``None`` when it is empty or unreadable."""
    try:
        fields = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return None
    return WriterIdentity.from_fields(fields) if isinstance(fields, dict) else None


@contextmanager
def _naming_the_path(target: Path, path: str, operation: str) -> Iterator[None]:
    """Turn an ``OSError`` of a write (a full disk, a read-only mount) into a ``StorageError`` naming the file.

    Python's ``ENOSPC`` says only "No space left on device", and an ``fsync`` error names no file at all.
    ``FileExistsError`` and ``FileNotFoundError`` pass unchanged: the ``Storage`` contract branches on them.
    """
    try:
        yield
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as err:
        msg = f"cannot write {target} ({operation}): {err.strerror or type(err).__name__}"
        raise StorageError(msg, path=path, operation=operation) from None


def _write_aside_then(target: Path, data: bytes, place: Callable[[str], object]) -> None:
    """Write ``data`` aside in ``target``'s folder, fsync it, ``place`` it, then fsync the folder.

    Readers never see a partial file; the file aside is gone afterwards whether ``place`` succeeded or raised.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=".part")
    try:
        _write_durably(fd, data)
        place(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_dir(target.parent)


def _write_durably(fd: int, data: bytes) -> None:
    """Write ``data`` to the new file open at ``fd``, fsync it and close it."""
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    """Make a rename or link durable across a power loss, not only a process crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
