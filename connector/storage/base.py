"""The storage interface every landing-zone backend implements.

Paths are POSIX-style and relative to the backend's root (the landing-zone folder, or the checkpoint
folder). The contract follows pyiceberg's ``create(overwrite=False)``: operations that could replace a
published file raise ``FileExistsError`` instead, so "never overwrite" is enforced at the lowest layer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import timedelta

#: Prefix of a backend's in-flight writes (written aside, then moved into place). Open mirroring skips
#: underscore-prefixed names, and a crash can leave such a file behind: ``cleanup_temporary`` removes them.
TEMP_PREFIX = "_tmp_"


@dataclass(frozen=True)
class FileInfo:
    """One entry of a listing."""

    path: str
    size: int
    is_dir: bool


class Storage(ABC):
    """A folder tree that can create, read, list and move files."""

    #: Human-readable location, safe to log (no credentials).
    url: str

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Return the content of ``path``; ``FileNotFoundError`` when absent."""

    @abstractmethod
    def create(self, path: str, data: bytes) -> None:
        """Write a new file at ``path``, creating parent folders.

        Raises:
            FileExistsError: ``path`` already exists; it is left untouched.
        """

    @abstractmethod
    def replace(self, path: str, data: bytes) -> None:
        """Atomically write ``path``, replacing any previous content (used for checkpoint state only)."""

    @abstractmethod
    def rename_new(self, source: str, destination: str) -> None:
        """Move ``source`` to ``destination`` atomically, never replacing an existing destination.

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


def join(*parts: str) -> str:
    """Join relative storage path parts with ``/``, ignoring empty parts."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
