"""The single-writer fence: one connector instance per checkpoint and per landing zone.

Two instances on one checkpoint or landing zone corrupt each other. Both number files in the same
folders, both write the ledger, and the start-up clean-up of one (``MirrorSink.recover``) deletes the
other's uploads in flight. So before anything reads the ledger or touches the landing zone, the
instance takes a writer lease on each (``writer.lock`` in the checkpoint, ``_writer.lock`` at the
landing-zone root: open mirroring ignores ``_``-prefixed names) and keeps them until it exits. A second
instance is refused with ``WriterFenced`` naming the holder, whichever of the two it shares.

The lease is the backend's own (``Storage.acquire_lease``): ``flock`` on a local folder, which the
kernel drops when the process dies; a renewed 60 s blob lease on OneLake / ADLS Gen2, which can be lost
(a network partition longer than the lease, a lease broken by an operator). ``guard`` wraps the
storages the sink writes through so every write first checks the lease: an instance that lost it stops
publishing with a clear error instead of racing the one that took over.
"""

from __future__ import annotations

import atexit
import logging
from datetime import timedelta
from types import TracebackType

from typing_extensions import override

from connector.errors import WriterFenced
from connector.storage.base import FileInfo, Storage, WriterIdentity, WriterLease

log = logging.getLogger(__name__)

#: The lock file in the checkpoint folder (the ledger and Spark's offsets live beside it).
CHECKPOINT_LOCK = "writer.lock"
#: The lock file at the landing-zone root; the ``_`` prefix keeps it out of open mirroring's sight.
LANDING_LOCK = "_writer.lock"


class WriterFence:
    """The writer leases of one checkpoint and one landing zone, held together.

    Use as a context manager (``convert``), or ``hold_until_exit`` (the streaming job, whose leases
    must outlive every code path of ``run``).
    """

    def __init__(self, landing: Storage, checkpoint: Storage, holder: WriterIdentity | None = None) -> None:
        """Prepare the fence; nothing is locked until ``acquire``.

        Args:
            landing: The landing zone.
            checkpoint: The checkpoint folder holding the ledger.
            holder: Who this instance is; a fresh identity of this process when omitted.
        """
        self.holder = holder or WriterIdentity.of_this_process()
        self._landing = landing
        self._checkpoint = checkpoint
        self._leases: list[WriterLease] = []

    def acquire(self) -> WriterFence:
        """Take the checkpoint's lease, then the landing zone's; on any refusal, hold neither.

        Raises:
            WriterFenced: Another instance holds one of them.
        """
        try:
            self._leases.append(self._checkpoint.acquire_lease(CHECKPOINT_LOCK, self.holder))
            self._leases.append(self._landing.acquire_lease(LANDING_LOCK, self.holder))
        except BaseException:
            self.release()
            raise
        log.info(
            "writer fence held by %s on checkpoint %s and landing zone %s",
            self.holder.describe(),
            self._checkpoint.url,
            self._landing.url,
        )
        return self

    def hold_until_exit(self) -> WriterFence:
        """``acquire``, and release when the interpreter exits (a crash or kill frees a lease anyway)."""
        self.acquire()
        atexit.register(self.release)
        return self

    def release(self) -> None:
        """Release every lease held (landing zone first); safe to call more than once."""
        while self._leases:
            lease = self._leases.pop()
            try:
                lease.release()
            except Exception as exc:  # noqa: BLE001 - a failed release must not hide the exit status
                log.warning("could not release the writer lease %s: %s", lease.location, exc)

    def check(self) -> None:
        """Return when every lease is still held.

        Raises:
            WriterFenced: A lease was lost or released; writing now could race another instance.
        """
        if not self._leases:
            reason = f"no writer lease is held by {self.holder.describe()}; refusing to write"
            raise WriterFenced(self._landing.url, self.holder.describe(), reason)
        for lease in self._leases:
            lease.check()

    @property
    def landing(self) -> Storage:
        """The landing zone, with every write checking the fence first."""
        return FencedStorage(self._landing, self)

    @property
    def checkpoint(self) -> Storage:
        """The checkpoint folder, with every write checking the fence first."""
        return FencedStorage(self._checkpoint, self)

    def __enter__(self) -> WriterFence:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


class FencedStorage(Storage):
    """A storage whose writes go through only while its fence is held.

    Reads pass straight through: reading cannot harm another writer. Every operation that creates,
    moves or deletes checks the fence first, so an instance whose OneLake lease lapsed fails its next
    write with ``WriterFenced`` rather than publishing beside the instance that took over.
    """

    def __init__(self, inner: Storage, fence: WriterFence) -> None:
        self.inner = inner
        self.fence = fence
        self.url = inner.url

    @override
    def read_bytes(self, path: str) -> bytes:
        return self.inner.read_bytes(path)

    @override
    def create(self, path: str, data: bytes) -> None:
        self.fence.check()
        self.inner.create(path, data)

    @override
    def write_aside(self, path: str, data: bytes) -> None:
        self.fence.check()
        self.inner.write_aside(path, data)

    @override
    def replace(self, path: str, data: bytes) -> None:
        self.fence.check()
        self.inner.replace(path, data)

    @override
    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        self.fence.check()
        self.inner.rename_new(source, destination, size=size)

    @override
    def size(self, path: str) -> int | None:
        return self.inner.size(path)

    @override
    def list_dir(self, path: str) -> list[FileInfo]:
        return self.inner.list_dir(path)

    @override
    def delete(self, path: str) -> None:
        self.fence.check()
        self.inner.delete(path)

    @override
    def delete_tree(self, path: str) -> None:
        self.fence.check()
        self.inner.delete_tree(path)

    @override
    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        self.fence.check()
        return self.inner.cleanup_temporary(prefix, older_than=older_than)

    @override
    def acquire_lease(self, path: str, holder: WriterIdentity) -> WriterLease:
        self.fence.check()
        return self.inner.acquire_lease(path, holder)

    @override
    def exists(self, path: str) -> bool:
        return self.inner.exists(path)
