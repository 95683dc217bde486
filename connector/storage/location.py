"""Where a folder of the connector lives and as whom it is opened: one value, checked when built.

A landing zone, a checkpoint or a dead-letter folder travels as a ``StorageLocation`` from the config to the
driver, the executors (pickled with each task), the read-back tools and the dead-letter output; each opens it with
``open()``. Its URL is checked once, here: an empty setting, a SAS token in the query (it would be logged with
the URL) and a URL the OneLake backend cannot parse are refused with the setting's name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from connector.errors import ConfigError
from connector.storage.identity import CredentialConfig

if TYPE_CHECKING:
    from connector.storage.base import Storage
    from connector.storage.retry import RetrySettings


@dataclass(frozen=True)
class StorageLocation:
    """A local folder or a OneLake / ADLS Gen2 URL, with the identity that opens it.

    Attributes:
        url: The folder's path or URL, as configured.
        identity: Who opens it (remote URLs only); its secrets stay ``SecretStr`` and references.
        setting: The setting it came from, named in every refusal (``landing_zone.url``, ``dead_letter.url``).
    """

    url: str
    identity: CredentialConfig = field(default_factory=CredentialConfig)
    setting: str = field(default="landing_zone.url", compare=False)

    def __post_init__(self) -> None:
        check_url(self.url, self.setting)

    @property
    def remote(self) -> bool:
        """Whether this is a OneLake / ADLS Gen2 URL rather than a local folder."""
        return is_remote(self.url)

    @property
    def scheme(self) -> str:
        """The URL scheme that chose the backend (``BACKENDS``); ``""`` for a local folder."""
        return scheme_of(self.url)

    def absolute(self) -> StorageLocation:
        """This location with a local folder made absolute: a Spark worker's working directory is not the driver's."""
        if self.remote:
            return self
        return StorageLocation(str(Path(self.url).resolve()), self.identity, self.setting)

    def open(self, retry: RetrySettings | None = None) -> Storage:
        """The storage backend for this location, chosen by its URL scheme (``BACKENDS``, as pyiceberg does).

        The caller closes it (``close``, or ``with``) when it holds connections to let go of.
        """
        return BACKENDS[self.scheme](self, retry)

    def __str__(self) -> str:
        return self.url


def _open_local(location: StorageLocation, retry: RetrySettings | None) -> Storage:
    from connector.storage.local import LocalStorage

    return LocalStorage(location.url)


def _open_onelake(location: StorageLocation, retry: RetrySettings | None) -> Storage:
    from connector.storage.onelake import open_onelake

    return open_onelake(location.url, location.identity, retry)


#: URL scheme → the backend that opens it (imported when first opened); ``""`` is a path without a scheme.
BACKENDS: Mapping[str, Callable[[StorageLocation, RetrySettings | None], Storage]] = {
    "": _open_local,
    "https": _open_onelake,
    "http": _open_onelake,  # a loopback emulator only: the URL check refuses plain http elsewhere
    "abfss": _open_onelake,
    "abfs": _open_onelake,  # refused with a hint to use abfss
}


def scheme_of(url: str) -> str:
    """The scheme of ``url`` that names a backend in ``BACKENDS``; ``""`` (a local folder) for any other text."""
    head, separator, _ = url.partition("://")
    return head if separator and head in BACKENDS else ""


def is_remote(url: str) -> bool:
    """Whether ``url`` names OneLake / ADLS Gen2 rather than a local folder."""
    return scheme_of(url) != ""


def check_url(url: str, setting: str = "landing_zone.url") -> None:
    """Refuse an empty folder setting, a URL with a SAS token, and a URL the OneLake backend cannot parse.

    An empty setting used to mean "the current directory": the job then wrote table folders wherever it
    was started. A SAS token would travel into logs with the URL; the storage backend authenticates with
    an identity (``landing_zone.credential``) instead.

    Raises:
        ConfigError: The message starts with ``setting`` and shows the URL without its query.
    """
    if not url.strip():
        flag = " (--landing-zone)" if setting == "landing_zone.url" else ""
        msg = f"{setting} is empty; give a local folder or a OneLake URL{flag}"
        raise ConfigError(msg)
    if not is_remote(url):
        return
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # not even a URL: parse_location says why, without the query
        parts = None
    if parts is not None and (parts.query or parts.fragment):
        shown = f"{parts.scheme}://{parts.netloc}{parts.path}"
        msg = (
            f"{setting} {shown} carries a query string (a SAS token?), which is not accepted: it would "
            "be logged with the URL. Remove it and use a credential instead (landing_zone.credential: "
            "workload_identity, managed_identity, client_secret, client_certificate or default)"
        )
        raise ConfigError(msg)
    from connector.storage.onelake.location import parse_location

    try:
        parse_location(url)
    except ValueError as exc:
        shown = url.strip().split("?", 1)[0].split("#", 1)[0]
        kind = "landing-zone" if setting == "landing_zone.url" else "OneLake / ADLS Gen2 folder"
        msg = f"{setting} {shown} is not a {kind} URL: {exc}"
        raise ConfigError(msg) from None


def as_location(value: StorageLocation | str, setting: str = "landing_zone.url") -> StorageLocation:
    """``value`` as a location; a bare path or URL is opened with the default identity (a local folder, a test)."""
    return value if isinstance(value, StorageLocation) else StorageLocation(value, setting=setting)
