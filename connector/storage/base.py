"""The storage interface every landing-zone backend implements.

Paths are POSIX-style and relative to the backend's root (the landing-zone folder, or the checkpoint
folder). The contract follows pyiceberg's ``create(overwrite=False)``: operations that could replace a
published file raise ``FileExistsError`` instead, so "never overwrite" is enforced at the lowest layer.
"""

from __future__ import annotations

import os
import secrets
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Self

#: Prefix of a backend's in-flight writes (written aside, then moved into place). Open mirroring skips
#: underscore-prefixed names, and a crash can leave such a file behind: ``cleanup_temporary`` removes them.
TEMP_PREFIX = "_tmp_"


@dataclass(frozen=True)
class FileInfo:
    """One entry of a listing."""

    path: str
    size: int
    is_dir: bool


@dataclass(frozen=True)
class WriterIdentity:
    """Who holds a writer lease, recorded beside the lease so a refused instance can name the holder.

    Host and pid find the process; the start time tells a stale record from a live one; the random
    instance id tells two instances apart even when a restarted pod reuses host name and pid.
    """

    host: str
    pid: int
    started: str
    instance: str = field(default_factory=lambda: secrets.token_hex(6))

    @classmethod
    def of_this_process(cls) -> WriterIdentity:
        """A new identity for this process, started now, with a fresh instance id."""
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(host=socket.gethostname(), pid=os.getpid(), started=started)

    def describe(self) -> str:
        """One line for logs and errors: ``instance <id> (pid <pid> on <host>, started <time>)``."""
        return f"instance {self.instance} (pid {self.pid} on {self.host}, started {self.started})"

    def as_fields(self) -> dict[str, str]:
        """ASCII name/value pairs, fit for a JSON lock file and for storage metadata alike."""
        return {
            "writer_host": self.host.encode("ascii", "replace").decode(),
            "writer_pid": str(self.pid),
            "writer_started": self.started,
            "writer_instance": self.instance,
        }

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> WriterIdentity | None:
        """Read back ``as_fields``; ``None`` when the record is missing or damaged."""
        lowered = {str(k).lower(): str(v) for k, v in fields.items()}
        try:
            return cls(
                host=lowered["writer_host"],
                pid=int(lowered["writer_pid"]),
                started=lowered["writer_started"],
                instance=lowered["writer_instance"],
            )
        except (KeyError, ValueError):
            return None


class WriterLease(ABC):
    """An exclusive hold on one storage root, taken by ``Storage.acquire_lease``.

    Attributes:
        location: The lock file's location, safe to log.
        holder: Who holds it (this process).
    """

    location: str
    holder: WriterIdentity

    @abstractmethod
    def check(self) -> None:
        """Return when the lease is still held, so writing is safe.

        Raises:
            WriterFenced: The lease was released, lost (taken over after it expired, or broken), or
                could not be renewed long enough that another instance may hold it now.
        """

    @abstractmethod
    def release(self) -> None:
        """Give the lease up so another instance can start at once; releasing twice is harmless."""


class Storage(ABC):
    """A folder tree that can create, read, list and move files.

    Closable, and a context manager that closes it: a remote backend holds a connection pool until then.
    """

    #: Human-readable location, safe to log (no credentials).
    url: str

    def close(self) -> None:  # noqa: B027 - a local folder holds nothing: not every backend must override it
        """Let go of what the backend holds (connections); nothing by default, and closing twice is harmless."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Return the content of ``path``; ``FileNotFoundError`` when absent."""

    @abstractmethod
    def create(self, path: str, data: bytes) -> None:
        """Write a new file at ``path``, creating parent folders.

        Raises:
            FileExistsError: ``path`` already exists; it is left untouched.
        """

    def write_aside(self, path: str, data: bytes) -> None:
        """Write a new file at an ``_``-prefixed ``path`` unique to this write, in the fewest round trips.

        For staged files only: mirroring ignores the name, and nothing reads the file until its writer's metadata
        reaches the driver, which then renames it (``rename_new``). So the write need not be atomic: a crash can
        leave the file partial, but then its writer never reported it and the file is an orphan that start-up
        removes. The default is ``create`` (atomic, and as cheap on a local disk); OneLake skips its upload aside.

        Raises:
            FileExistsError: ``path`` already exists (where the medium can tell at no cost); it is left untouched.
        """
        self.create(path, data)

    @abstractmethod
    def replace(self, path: str, data: bytes) -> None:
        """Atomically write ``path``, replacing any previous content (used for checkpoint state only)."""

    @abstractmethod
    def rename_new(self, source: str, destination: str, *, size: int | None = None) -> None:
        """Move ``source`` to ``destination`` atomically, never replacing an existing destination.

        ``size`` is the source's size when the caller knows it (a staged file's, from its writer): a remote
        storage then recognises a retried move whose first answer was lost without reading the source first.

        Raises:
            FileExistsError: ``destination`` already exists; both files are left untouched.
            FileNotFoundError: ``source`` does not exist.
        """

    @abstractmethod
    def size(self, path: str) -> int | None:
        """Return the size of the file at ``path``, or ``None`` when it does not exist."""

    @abstractmethod
    def list_dir(self, path: str) -> list[FileInfo]:
        """List the direct children of folder ``path`` (empty when it does not exist)."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete the file at ``path``; a missing file is not an error."""

    @abstractmethod
    def delete_tree(self, path: str) -> None:
        """Delete folder ``path`` and everything under it; a missing folder is not an error."""

    @abstractmethod
    def cleanup_temporary(self, prefix: str = "", *, older_than: timedelta | None = None) -> list[str]:
        """Delete the ``_tmp_*`` files that interrupted writes left under folder ``prefix``, recursively.

        Meant for start-up, when no write of this process is in flight. Numbered files, ``_metadata.json``
        and every other name are never touched.

        Args:
            prefix: Folder to clean (``""`` for the whole root).
            older_than: Only delete files last modified at least this long ago, to spare the in-flight
                writes of another process; ``None`` deletes them all.

        Returns:
            The deleted paths, relative to the root.
        """

    def exists(self, path: str) -> bool:
        """Return whether a file exists at ``path``."""
        return self.size(path) is not None

    @abstractmethod
    def acquire_lease(self, path: str, holder: WriterIdentity) -> WriterLease:
        """Take the exclusive writer lease kept on the file ``path`` (created if missing), recording ``holder``.

        One instance at a time may write a checkpoint or landing zone; each backend holds the lease
        with the mechanism its medium offers (see ``connector.publish.fence``).

        Raises:
            WriterFenced: Another instance holds the lease; the message names it when it is known.
        """


def join(*parts: str) -> str:
    """Join relative storage path parts with ``/``, ignoring empty parts."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
