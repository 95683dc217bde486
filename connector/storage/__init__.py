"""Storage backends, chosen by URL (``location.StorageLocation.open``): a local path, or a OneLake / ADLS Gen2 URL."""

from __future__ import annotations

from typing import Literal

from connector.storage.base import FileInfo, Storage, join
from connector.storage.local import LocalStorage

__all__ = ["CredentialKind", "FileInfo", "LocalStorage", "Storage", "is_remote", "join"]

CredentialKind = Literal["default", "workload_identity", "managed_identity", "client_secret", "client_certificate"]
"""An Azure identity of ``connector.storage.credentials`` (every ``credential`` setting takes one)."""


def is_remote(url: str) -> bool:
    """Whether ``url`` names OneLake / ADLS Gen2 rather than a local folder."""
    return url.startswith(("https://", "http://", "abfss://", "abfs://"))
