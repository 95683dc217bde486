"""Where a folder of the connector lives and as whom it is opened: one value, checked when built.

A landing zone, a checkpoint or a dead-letter folder travels as a ``StorageLocation`` from the config to the
driver, the executors (pickled with each task), the read-back tools and the dead-letter output; each opens it with
``open()``. Its URL is checked and parsed once, here: an empty setting, a SAS token in the query (it would be
logged with the URL) and a URL the OneLake backend cannot parse are refused with the setting's name. The parsed
address travels with the location (the executors open it without parsing again), and the location answers what
callers would otherwise split the URL for: the Fabric item's ``Tables`` folder, a folder beside it, containment.
Nothing outside ``connector.storage`` parses or splits a storage URL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from connector.errors import ConfigError
from connector.storage.errors import InvalidStorageURL
from connector.storage.identity import CredentialConfig

if TYPE_CHECKING:
    from connector.storage.base import Storage
    from connector.storage.onelake.location import OneLakeLocation
    from connector.storage.onelake.storage import OneLakeStorage
    from connector.storage.retry import RetrySettings

#: The tail of a mirrored database's landing zone: ``<workspace>/<item>/Files/LandingZone``.
_LANDING_ZONE_TAIL = "/Files/LandingZone"


@dataclass(frozen=True)
class StorageLocation:
    """A local folder or a OneLake / ADLS Gen2 URL, with the identity that opens it.

    Attributes:
        url: The folder's path or URL, as configured.
        identity: Who opens it (remote URLs only); its secrets stay ``SecretStr`` and references.
        setting: The setting it came from, named in every refusal (``landing_zone.url``, ``dead_letter.url``).
        address: A remote URL parsed into endpoint, filesystem (workspace or container) and root folder (item
            and path), once, when built; ``None`` for a local folder. It is pickled with the location.
    """

    url: str
    identity: CredentialConfig = field(default_factory=CredentialConfig)
    setting: str = field(default="landing_zone.url", compare=False)
    address: OneLakeLocation | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", check_url(self.url, self.setting))

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

    @property
    def name(self) -> str:
        """The folder's own name: the last segment of its path or URL (``LandingZone``)."""
        return self.url.rstrip("/").rpartition("/")[2]

    def sibling(self, name: str) -> str | None:
        """The path or URL of the folder ``name`` beside this one, in this one's form (``abfss://`` stays so).

        ``None`` when nothing is beside it: a relative folder without a parent, or a whole workspace or container.
        """
        if self.address is not None and not self.address.root:
            return None
        head = self.url.rstrip("/").rpartition("/")[0]
        return f"{head}/{name}" if head else None

    def tables_folder(self) -> str | None:
        """The Fabric item's ``Tables`` folder, in this URL's form, when this is a mirrored database's landing zone.

        Open mirroring applies ``<workspace>/<item>/Files/LandingZone`` to Delta tables under
        ``<workspace>/<item>/Tables``. ``None`` for anything else: a local folder, ADLS Gen2, another folder.
        """
        stripped = self.url.rstrip("/")
        if self.address is None or self.address.kind != "onelake" or not stripped.endswith(_LANDING_ZONE_TAIL):
            return None
        return f"{stripped.removesuffix(_LANDING_ZONE_TAIL)}/Tables"

    def contains(self, other: StorageLocation) -> bool:
        """Whether ``other`` is this folder or a folder inside it.

        Local folders compare resolved; remote ones by host (a regional OneLake host is OneLake's), filesystem
        and folders, case-insensitively. A local folder never contains a remote one, nor the other way round.
        """
        if other.remote != self.remote:
            return False
        if not self.remote:
            inner, outer = Path(other.url).resolve(), Path(self.url).resolve()
            return inner == outer or outer in inner.parents
        outer_parts = self._comparable_parts()
        return other._comparable_parts()[: len(outer_parts)] == outer_parts

    def _comparable_parts(self) -> tuple[str, ...]:
        """The remote address as host (regions folded), filesystem and folders, case-folded."""
        if self.address is None:  # only asked of a remote location, whose address was parsed when built
            return ()
        host = self.address.account_url.split("://", 1)[-1].lower()
        host = re.sub(r"^[a-z0-9]+-onelake\.", "onelake.", host)
        folders = tuple(p.casefold() for p in self.address.root.split("/") if p)
        return (host, self.address.filesystem.casefold(), *folders)

    def open(self, retry: RetrySettings | None = None) -> Storage:
        """The storage backend for this location, chosen by its URL scheme (``BACKENDS``, as pyiceberg does).

        The caller closes it (``close``, or ``with``) when it holds connections to let go of.
        """
        return BACKENDS[self.scheme](self, retry)

    def open_remote(self, retry: RetrySettings | None = None) -> OneLakeStorage:
        """This remote folder's OneLake / ADLS Gen2 backend, with what only it has (``check``'s write probe, leases).

        Opened from the address parsed when the location was built: an executor that unpickles it parses nothing.

        Raises:
            InvalidStorageURL: This is a local folder.
            InvalidCredential: The identity's settings are incomplete.
        """
        if self.address is None:
            msg = f"{self.setting} {self.url} is a local folder, not a OneLake / ADLS Gen2 URL"
            raise InvalidStorageURL(msg)
        from connector.storage.onelake import open_onelake

        return open_onelake(self.address, self.identity, retry)

    def __str__(self) -> str:
        return self.url


def _open_local(location: StorageLocation, retry: RetrySettings | None) -> Storage:
    from connector.storage.local import LocalStorage

    return LocalStorage(location.url)


def _open_onelake(location: StorageLocation, retry: RetrySettings | None) -> Storage:
    return location.open_remote(retry)


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


def check_url(url: str, setting: str = "landing_zone.url") -> OneLakeLocation | None:
    """Refuse an empty folder setting, a URL with a SAS token, and a URL the OneLake backend cannot parse.

    Returns the parsed address of a remote URL (``None`` for a local folder): the only parse of the setting.

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
        return None
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
        return parse_location(url)
    except ValueError as exc:
        shown = url.strip().split("?", 1)[0].split("#", 1)[0]
        kind = "landing-zone" if setting == "landing_zone.url" else "OneLake / ADLS Gen2 folder"
        msg = f"{setting} {shown} is not a {kind} URL: {exc}"
        raise ConfigError(msg) from None


def abfss_form(url: str) -> str:
    """A OneLake folder URL as ``abfss://<workspace>@<host>/<path>``, the form delta-rs opens.

    Takes a folder the configuration names but no ``StorageLocation`` holds: a mirrored database's ``Tables``
    folder is no landing-zone URL (``parse_location`` wants an item's ``Files`` folder).
    """
    parts = urlsplit(url.rstrip("/"))
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if parts.scheme == "abfss":
        workspace, host, rest = unquote(parts.username or ""), parts.hostname or "", segments
    else:
        workspace, host, rest = segments[0], parts.netloc, segments[1:]
    return f"abfss://{workspace}@{host}/{'/'.join(rest)}"


def as_location(value: StorageLocation | str, setting: str = "landing_zone.url") -> StorageLocation:
    """``value`` as a location; a bare path or URL is opened with the default identity (a local folder, a test)."""
    return value if isinstance(value, StorageLocation) else StorageLocation(value, setting=setting)
