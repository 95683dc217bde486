"""Where a OneLake / ADLS Gen2 storage root lives: parsing its URL (shown through ``secrets.redact_url``).

Turns a landing-zone, ``abfss://``, ADLS Gen2 or loopback-emulator URL into the endpoint, filesystem and
root folder the DFS API addresses (``parse_location``), refusing forms the connector cannot use with a
message that names what to fix, and never echoing a SAS signature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, quote, unquote, urlsplit

from connector.secrets import redact_url
from connector.storage.errors import InvalidStorageURL

_ONELAKE_HOST = re.compile(r"^(?:[a-z0-9-]+-)?onelake\.dfs\.fabric\.microsoft\.com$", re.IGNORECASE)
_ADLS_HOST = re.compile(r"^[a-z0-9]{3,24}\.dfs\.core\.[a-z0-9.-]+$", re.IGNORECASE)
_BLOB_HOST = re.compile(r"(^|\.)blob\.(core|fabric)\.", re.IGNORECASE)
# The SDK addresses these hosts path-style (``/<account>/<filesystem>/...``), the emulator convention.
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})

LocationKind = Literal["onelake", "adls", "loopback"]

_URL_FORMS = (
    "https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone, "
    "https://<region>-onelake.dfs.fabric.microsoft.com/..., "
    "abfss://<workspace>@onelake.dfs.fabric.microsoft.com/<item>/Files/..., "
    "abfss://<container>@<account>.dfs.core.windows.net/<path>, "
    "https://<account>.dfs.core.windows.net/<container>/<path>, "
    "or http(s)://127.0.0.1:<port>/<account>/<container>/<path> for a local emulator"
)


@dataclass(frozen=True)
class OneLakeLocation:
    """Where a storage root lives, split the way the DFS API addresses it.

    Attributes:
        account_url: The endpoint the SDK talks to: ``https://onelake.dfs.fabric.microsoft.com``,
            ``https://<account>.dfs.core.windows.net`` or ``http(s)://127.0.0.1:<port>/<account>``.
        filesystem: The workspace (OneLake) or container (ADLS Gen2).
        root: The folder inside the filesystem that paths are relative to (no leading or trailing
            slash; ``""`` for the filesystem root). For OneLake it starts with the item.
        kind: ``onelake``, ``adls`` or ``loopback`` (a path-style endpoint on this machine).
    """

    account_url: str
    filesystem: str
    root: str
    kind: LocationKind

    @property
    def url(self) -> str:
        """The location as an ``https`` URL, safe to log (no credentials, no query)."""
        parts = [self.account_url.rstrip("/"), quote(self.filesystem)]
        if self.root:
            parts.append(quote(self.root))
        return "/".join(parts)


def parse_location(url: str) -> OneLakeLocation:
    """Split a landing-zone or ADLS Gen2 URL into endpoint, filesystem and root folder.

    Accepts the landing-zone URL exactly as the mirrored database's Home page shows it (workspace and
    item as GUIDs or names such as ``Sales.MountedRelationalDatabase``, percent-encoded or not),
    regional OneLake hosts, ``abfss://`` URLs, ADLS Gen2 ``https`` URLs, and path-style loopback URLs
    (``http(s)://127.0.0.1:<port>/<account>/<filesystem>/<path>``), which is how the SDK addresses a
    local emulator.

    Args:
        url: The URL from the connector config.

    Returns:
        The parsed location.

    Raises:
        InvalidStorageURL: (a ``ValueError`` and a ``ConfigError``) The URL is not a URL, has another
            form, carries a query (SAS tokens are not supported: use an identity), or points at a OneLake
            item without its ``Files`` folder.
    """
    text = url.strip()
    parts, port = _split(text)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if any(s in {".", ".."} for s in segments):
        msg = f"storage URL must not contain '.' or '..' segments: {text}"
        raise InvalidStorageURL(msg)
    if scheme in {"abfss", "abfs"}:
        kind, account_url, filesystem = _abfss_endpoint(scheme, parts, host, port, text)
    elif scheme in {"https", "http"}:
        kind, account_url, filesystem, segments = _https_endpoint(scheme, host, port, segments, text)
    else:
        msg = f"unsupported storage URL {text!r}; expected one of: {_URL_FORMS}"
        raise InvalidStorageURL(msg)

    if kind == "onelake" and (len(segments) < 2 or segments[1] != "Files"):
        msg = (
            f"OneLake URL must point into an item's Files folder, like "
            f"https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone "
            f"(copy it from the mirrored database's Home page): {text}"
        )
        raise InvalidStorageURL(msg)
    return OneLakeLocation(account_url=account_url, filesystem=filesystem, root="/".join(segments), kind=kind)


def _split(text: str) -> tuple[SplitResult, str]:
    """``text``'s parts and its ``:port`` (or ``''``); a malformed URL or one with a query is refused."""
    try:
        parts = urlsplit(text)
        port = f":{parts.port}" if parts.port else ""
    except ValueError as exc:  # an unclosed IPv6 bracket, a port that is no number or out of range
        msg = f"storage URL {redact_url(text, keep_user=True)} is malformed: {exc}"
        raise InvalidStorageURL(msg) from None
    if parts.query or parts.fragment:
        shown = redact_url(text, keep_user=True)
        msg = f"storage URL must not have a query or fragment (SAS tokens are not supported): {shown}"
        raise InvalidStorageURL(msg)
    return parts, port


def _abfss_endpoint(scheme: str, parts: SplitResult, host: str, port: str, text: str) -> tuple[LocationKind, str, str]:
    """Kind, account URL and filesystem of ``abfss://<filesystem>@<host>/<path>``."""
    if scheme == "abfs":
        msg = f"use abfss:// (TLS); abfs:// is not supported: {text}"
        raise InvalidStorageURL(msg)
    filesystem = unquote(parts.username or "")
    if not filesystem:
        msg = f"abfss URL needs <filesystem>@<host>: {text}"
        raise InvalidStorageURL(msg)
    return _remote_kind(host, text), f"https://{host}{port}", filesystem


def _https_endpoint(
    scheme: str, host: str, port: str, segments: list[str], text: str
) -> tuple[LocationKind, str, str, list[str]]:
    """Kind, account URL, filesystem and the remaining path segments of an ``http(s)://`` URL."""
    kind: LocationKind
    if host in _LOOPBACK_HOSTS:
        if len(segments) < 2:
            msg = f"loopback URL needs /<account>/<filesystem>[/<path>]: {text}"
            raise InvalidStorageURL(msg)
        kind = "loopback"
        account_url = f"{scheme}://{host}{port}/{quote(segments[0])}"
        segments = segments[1:]
    else:
        kind = _remote_kind(host, text)
        if scheme != "https":
            msg = f"OneLake and ADLS Gen2 need https: {text}"
            raise InvalidStorageURL(msg)
        account_url = f"https://{host}{port}"
    if not segments:
        msg = f"storage URL needs a filesystem (workspace or container) after the host: {text}"
        raise InvalidStorageURL(msg)
    return kind, account_url, segments[0], segments[1:]


def _remote_kind(host: str, text: str) -> LocationKind:
    if _ONELAKE_HOST.match(host):
        return "onelake"
    if _ADLS_HOST.match(host):
        return "adls"
    if _BLOB_HOST.search(host):
        msg = f"use the DFS endpoint (.dfs. instead of .blob.) for {text}"
        raise InvalidStorageURL(msg)
    msg = f"unsupported storage host {host!r} in {text}; expected one of: {_URL_FORMS}"
    raise InvalidStorageURL(msg)
