"""Storage backends, chosen by URL scheme (``location.BACKENDS``): a local path, or a OneLake / ADLS Gen2 URL."""

from __future__ import annotations

from typing import Literal

from connector.storage.base import FileInfo, Storage, join
from connector.storage.local import LocalStorage

__all__ = ["CredentialKind", "FileInfo", "LocalStorage", "Storage", "join"]

CredentialKind = Literal["default", "workload_identity", "managed_identity", "client_secret", "client_certificate"]
"""An Azure identity of ``connector.storage.credentials`` (every ``credential`` setting takes one)."""
