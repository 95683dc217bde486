"""A test's landing zone on one backend: what the ``landing`` fixture (tests/conftest.py) yields."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from connector.storage.base import Storage

#: The filesystem (the Fabric workspace) landing zones are created in on the DFS test double.
WORKSPACE = "workspace"


def unique_item_root() -> str:
    """A landing-zone root in a fresh mirrored-database item, shaped like a real one."""
    return f"{uuid.uuid4().hex[:12]}.MountedRelationalDatabase/Files/LandingZone"


@dataclass(frozen=True)
class Landing:
    """One empty landing zone of a test.

    Attributes:
        backend: ``local`` or ``onelake`` (the DFS test double).
        storage: The landing zone as the connector's tools see it (``validate``, ``replay``).
        url: What to pass as ``--landing-zone``: a folder, or the landing zone's https URL.
    """

    backend: str
    storage: Storage
    url: str

    def files(self, folder: str = "") -> list[str]:
        """Paths of every file under ``folder``, recursively, sorted."""
        out: list[str] = []
        for entry in self.storage.list_dir(folder):
            if entry.is_dir:
                out.extend(self.files(entry.path))
            else:
                out.append(entry.path)
        return sorted(out)

    def snapshot(self, folder: str = "") -> dict[str, bytes]:
        """Every file under ``folder`` with its content."""
        return {path: self.storage.read_bytes(path) for path in self.files(folder)}
