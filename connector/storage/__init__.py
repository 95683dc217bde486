"""Storage backends, chosen by URL: a local path, or a OneLake / ADLS Gen2 URL."""

from __future__ import annotations

from connector.config import CredentialKind
from connector.storage.base import FileInfo, Storage, join
from connector.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "is_remote", "join", "open_storage"]


def is_remote(url: str) -> bool:
    """Whether ``url`` names OneLake / ADLS Gen2 rather than a local folder."""
    return url.startswith(("https://", "http://", "abfss://", "abfs://"))


def open_storage(url: str, credential: CredentialKind = "default") -> Storage:
    """Open the backend for ``url`` (pyiceberg's scheme-based selection)."""
    if not is_remote(url):
        return LocalStorage(url)
    from connector.storage.onelake import open_onelake

    return open_onelake(url, credential)
