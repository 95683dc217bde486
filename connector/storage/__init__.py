"""Storage backends, chosen by URL: a local path, or a OneLake / ADLS Gen2 URL."""

from __future__ import annotations

from typing import Literal

from connector.storage.base import FileInfo, Storage, join
from connector.storage.local import LocalStorage

__all__ = ["CredentialKind", "FileInfo", "LocalStorage", "Storage", "is_remote", "join", "open_storage"]

CredentialKind = Literal["default", "workload_identity", "managed_identity", "client_secret", "client_certificate"]
"""An Azure identity of ``connector.storage.credentials`` (every ``credential`` setting takes one)."""


def is_remote(url: str) -> bool:
    """Whether ``url`` names OneLake / ADLS Gen2 rather than a local folder."""
    return url.startswith(("https://", "http://", "abfss://", "abfs://"))


def open_storage(url: str, credential: CredentialKind = "default") -> Storage:
    """Open the backend for ``url`` (pyiceberg's scheme-based selection)."""
    if not is_remote(url):
        return LocalStorage(url)
    from connector.storage.onelake import open_onelake

    return open_onelake(url, credential)
