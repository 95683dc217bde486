"""The paths of one OneLake / ADLS Gen2 storage root: the Storage interface's relative paths, the DFS API's full ones.

Every operation of ``OneLakeStorage`` names a path relative to its root; the SDK wants it from the filesystem
(workspace or container) down, and errors and logs show it under the root's URL. A path that climbs out of the
root (``..``) is refused here, once for every operation.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from connector.storage.base import join


@dataclass(frozen=True)
class RootedPaths:
    """Maps paths relative to the root folder ``root`` (inside the filesystem) to full paths, and back.

    Attributes:
        url: The root's URL, safe to log: paths are shown under it.
        root: The root folder inside the filesystem (no leading or trailing slash; ``""`` for the filesystem).
    """

    url: str
    root: str

    def full(self, path: str) -> str:
        """The filesystem path of ``path`` (relative to the root).

        Raises:
            ValueError: ``path`` has a ``.`` or ``..`` segment.
        """
        parts = [p for p in path.strip("/").split("/") if p]
        if any(p in {".", ".."} for p in parts):
            msg = f"path {path!r} escapes the storage root {self.url}"
            raise ValueError(msg)
        return join(self.root, "/".join(parts))

    def file(self, path: str, operation: str) -> str:
        """The filesystem path of the file ``path``, which ``operation`` needs: the root itself is refused."""
        full = self.full(path)
        if not full:
            msg = f"{operation} needs a file path, not the storage root"
            raise ValueError(msg)
        return full

    def relative(self, full: str) -> str:
        """A filesystem path as the Storage interface names it (relative to the root)."""
        if not self.root:
            return full
        return full[len(self.root) + 1 :] if full.startswith(self.root + "/") else full

    def display(self, path: str) -> str:
        """``path`` (relative) under the root's URL, for logs and errors."""
        return f"{self.url}/{path}" if path else self.url

    def not_found(self, path: str) -> FileNotFoundError:
        """The error for a missing ``path`` (relative), naming it under the root's URL."""
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.display(path))
